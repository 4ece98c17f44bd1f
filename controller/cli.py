"""The ``tfjob-controller`` command line: ``run`` (the controller), ``sim`` (a simulated cluster),
``demo`` (the controller on an embedded simulated cluster, narrated), ``crd`` (print the CRD).

Bad arguments and expected failures (an unreadable kubeconfig, a port in use) end with one line
on stderr and a non-zero exit code, never a traceback; argparse's own errors exit 2.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from controller.ops.http import parse_addr
from controller.sim import MissingExtra, require_extra
from controller.tfjob.decide import DecideConfig


def _addr(text: str) -> tuple[str, int]:
    try:
        return parse_addr(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535, got {value}")
    return value


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _object_name(text: str) -> str:
    if len(text) > 253 or not _DNS_SUBDOMAIN.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a valid object name (lower-case letters, digits, '-' and '.', at most 253)"
        )
    return text


def _scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _qps(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of requests per second, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (0 disables the limit), got {text!r}")
    return value


def _env_default(name: str, parse: Any, fallback: Any) -> Any:
    """The value of environment variable ``name`` parsed like its flag, else ``fallback``.

    A bad value is reported like a bad flag (one line, exit 2) rather than silently ignored."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return fallback
    try:
        return parse(raw)
    except argparse.ArgumentTypeError as exc:
        print(f"tfjob-controller: environment variable {name}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


KUBE_API_QPS_ENV = "TFJOB_CONTROLLER_KUBE_API_QPS"
KUBE_API_BURST_ENV = "TFJOB_CONTROLLER_KUBE_API_BURST"


def build_parser() -> argparse.ArgumentParser:
    from controller.app import DEFAULT_KUBE_API_BURST, DEFAULT_KUBE_API_QPS

    parser = argparse.ArgumentParser(prog="tfjob-controller", description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", default=None, choices=["json", "console"],
                        help="default: console on a terminal, json otherwise")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the TFJob controller against a cluster")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config, then ~/.kube/config)")
    run.add_argument("--namespace", action="append", default=[], metavar="NS",
                     help="watch only this namespace (repeatable; default: all namespaces)")
    run.add_argument("--workers", type=_positive_int, default=16,
                     help="concurrent reconciles (default 16: a reconcile mostly waits on the API server, and a "
                          "failover must not queue behind other jobs' work; see docs/benchmarks/profiles)")
    run.add_argument("--metrics-addr", type=_addr, default=("0.0.0.0", 8080), metavar="HOST:PORT")
    run.add_argument("--health-addr", type=_addr, default=("0.0.0.0", 8081), metavar="HOST:PORT")
    run.add_argument("--kube-api-qps", type=_qps, metavar="QPS",
                     default=_env_default(KUBE_API_QPS_ENV, _qps, DEFAULT_KUBE_API_QPS),
                     help="client-side limit of API requests per second, watches included; 0 disables it "
                          f"(env {KUBE_API_QPS_ENV}; default {DEFAULT_KUBE_API_QPS:g}: see docs/benchmarks/profiles)")
    run.add_argument("--kube-api-burst", type=_positive_int, metavar="N",
                     default=_env_default(KUBE_API_BURST_ENV, _positive_int, DEFAULT_KUBE_API_BURST),
                     help=f"requests allowed at once above --kube-api-qps (env {KUBE_API_BURST_ENV}; "
                          f"default {DEFAULT_KUBE_API_BURST})")
    run.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True,
                     help="hold a Lease so only one replica acts (default on)")
    run.add_argument("--leader-election-namespace", metavar="NS",
                     help="namespace of the Lease (default: the pod's namespace, else 'default')")
    run.add_argument("--leader-election-id", type=_object_name, default="tfjob-controller", metavar="NAME",
                     help="name of the Lease (default tfjob-controller); give each shard of a split cluster its own")
    run.add_argument("--max-pods-per-job", type=_positive_int, default=DecideConfig.max_pods_per_job, metavar="N",
                     help="a job asking for more pods (all replica types together) fails validation "
                          f"(default {DecideConfig.max_pods_per_job})")
    run.add_argument("--failover-backoff", type=_scale, nargs=2, metavar=("BASE", "CAP"),
                     default=(DecideConfig.failover_backoff_base, DecideConfig.failover_backoff_cap),
                     help="back-off of repeat failovers of one dynamic worker index (the first is replaced as soon "
                          "as its pod is gone): BASE seconds before the second, doubling per failover up to CAP "
                          f"(default {DecideConfig.failover_backoff_base:g} {DecideConfig.failover_backoff_cap:g})")

    sim = sub.add_parser("sim", help="serve a simulated Kubernetes cluster until SIGINT/SIGTERM")
    sim.add_argument("--port", type=_port, default=0, help="port to listen on (0 picks a free one)")
    sim.add_argument("--kubeconfig", required=True, metavar="PATH", help="write a kubeconfig for the cluster here")
    sim.add_argument("--nodes", type=_positive_int, default=3, help="Ready nodes (default 3)")
    sim.add_argument("--time-scale", type=_scale, default=1.0,
                     help="multiplier of simulated durations (pod start, grace periods); default 1")
    sim.add_argument("--secure", action="store_true",
                     help="HTTPS with a generated CA, authentication (the kubeconfig's user is a cluster admin; "
                          "ServiceAccount tokens via 'kubectl create token', used with 'kubectl --token') and "
                          "RBAC authorization")

    demo = sub.add_parser("demo", help="run the controller on an embedded simulated cluster and narrate a story")
    demo.add_argument("--time-scale", type=_scale, default=0.05, help="simulated time multiplier (default 0.05)")

    sub.add_parser("crd", help="print the TFJob CustomResourceDefinition as YAML")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "run" and args.failover_backoff[0] > args.failover_backoff[1]:
        parser.error("--failover-backoff: BASE must not exceed CAP")
    from controller.ops.logging import configure_logging

    fmt = args.log_format or ("console" if sys.stderr.isatty() else "json")
    configure_logging(args.log_level, fmt)
    try:
        if args.command == "run":
            from controller.app import RunOptions, cluster_domain_from_env, run

            options = RunOptions(
                kubeconfig=args.kubeconfig,
                namespaces=args.namespace,
                workers=args.workers,
                metrics_addr=args.metrics_addr,
                health_addr=args.health_addr,
                leader_elect=args.leader_elect,
                leader_election_namespace=args.leader_election_namespace,
                leader_election_id=args.leader_election_id,
                cluster_domain=cluster_domain_from_env(),
                max_pods_per_job=args.max_pods_per_job,
                failover_backoff=tuple(args.failover_backoff),
                kube_api_qps=args.kube_api_qps,
                kube_api_burst=args.kube_api_burst,
            )
            return anyio.run(run, options)
        if args.command in ("sim", "demo"):
            require_extra(secure=getattr(args, "secure", False))
        if args.command == "sim":
            from controller.ops.simcmd import serve_sim

            return anyio.run(serve_sim, args.port, args.kubeconfig, args.nodes, args.time_scale, args.secure)
        if args.command == "demo":
            from controller.ops.demo import demo

            return anyio.run(demo, args.time_scale)
        if args.command == "crd":
            from controller.tfjob.crd import build_crd, to_yaml

            sys.stdout.write(to_yaml(build_crd()))
            return 0
    except KeyboardInterrupt:
        return 130
    except MissingExtra as exc:
        print(f"tfjob-controller {args.command}: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        # Expected operational failures: a missing kubeconfig, a port in use, a bad configuration value.
        print(f"tfjob-controller {args.command}: {exc}", file=sys.stderr)
        return 1
    raise AssertionError(f"unhandled command {args.command!r}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
