"""The ``tfjob-controller`` command line: ``run`` (the controller), ``sim`` (a simulated cluster),
``demo`` (the controller on an embedded simulated cluster, narrated), ``crd`` (print the CRD).

Bad arguments and expected failures (an unreadable kubeconfig, an unreachable cluster, a port in use)
end with one line on stderr and a non-zero exit code, never a traceback: 2 for a bad flag or
environment variable, 1 for a failure at run time.

Every flag of ``run`` (and the global ``--log-level``/``--log-format``) also has an environment-variable
form, ``TFJOB_CONTROLLER_<FLAG>`` (``--metrics-addr`` -> ``TFJOB_CONTROLLER_METRICS_ADDR``), so a
Deployment can be configured with ``env:`` or a ConfigMap. A flag on the command line wins over its
variable, which wins over the default. Repeatable flags take a comma-separated list; switches take
true/false. Upstream's ``CUSTOM_CLUSTER_DOMAIN`` is honoured after ``TFJOB_CONTROLLER_CLUSTER_DOMAIN``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NoReturn

import anyio

from controller.app import (
    AUTO,
    DEFAULT_KUBE_API_BURST,
    DEFAULT_KUBE_API_QPS,
    FALLBACK_KUBE_API_BURST,
    FALLBACK_KUBE_API_QPS,
)
from controller.ops.http import parse_addr
from controller.tfjob.decide import DecideConfig
from controller.tfjob.gang import SCHEDULER_NAMES, VOLCANO

ENV_PREFIX = "TFJOB_CONTROLLER_"


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``PROG: error: MESSAGE (see PROG --help)``), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


_scale = _positive_float  # --time-scale of sim and demo


class SimulatorMissing(RuntimeError):
    """``sim`` and ``demo`` were asked for, but the simulated cluster is not installed (or its extras are not)."""


SIM_INSTALL_HINT = "install it from a checkout with: pip install -e '.[sim]'"


def _simulator(module: str = "tfjob_sim") -> ModuleType:
    """The simulator package (or one of its modules), which ships apart from the controller: its own
    distribution (``sim/``), installed by the ``[sim]`` extra, never in the controller's wheel or image."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise SimulatorMissing(f"the simulated cluster is not installed ({exc}); {SIM_INSTALL_HINT}") from None


def _gang_schedulers(text: str) -> tuple[str, ...]:
    try:
        schedulers: tuple[str, ...] = _simulator("tfjob_sim.crds").parse_schedulers(text)
        return schedulers
    except (SimulatorMissing, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _requests_per_second(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of requests per second, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (0 disables the limit), got {text!r}")
    return value


def _auto_or(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A flag type that takes ``auto`` or what ``parse`` takes; parse's error then names both."""

    def parse_flag(text: str) -> Any:
        if text.strip().lower() == AUTO:
            return AUTO
        try:
            return parse(text)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(re.sub(r"^(expected|must be) ", r"\1 'auto' or ", str(exc))) from None

    return parse_flag


_qps = _auto_or(_requests_per_second)  # --kube-api-qps
_burst = _auto_or(_positive_int)  # --kube-api-burst


def _dns_suffix(text: str) -> str:
    text = text.strip().strip(".")
    labels = text.split(".") if text else []
    for label in labels:
        if not (
            0 < len(label) <= 63
            and label.replace("-", "").isalnum()
            and label.isascii()
            and label[0] != "-"
            and label[-1] != "-"
        ):
            raise argparse.ArgumentTypeError(f"not a DNS domain (e.g. cluster.local): {text!r}")
    return text.lower()


def _gang_scheduler(text: str) -> str:
    value = text.strip()
    if not value:
        return ""  # off (an empty variable in a Deployment's env)
    if value.lower() == VOLCANO:
        return VOLCANO  # upstream compares case-blind
    if value not in SCHEDULER_NAMES:
        raise argparse.ArgumentTypeError(f"unknown gang scheduler {text!r} (choose from {', '.join(SCHEDULER_NAMES)})")
    return value


def _switch(text: str) -> bool:
    value = text.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


@dataclass(frozen=True)
class Option:
    """One configuration option: a flag, its environment variable, its type and default.

    ``kind`` is ``"value"`` (``--flag VALUE``), ``"list"`` (repeatable; the variable is comma-separated),
    ``"pair"`` (``--flag A B``; the variable is ``A,B``) or ``"switch"`` (``--flag`` / ``--no-flag``; the
    variable is true/false). ``fallback_env`` names further
    variables read, in order, when the option's own is unset (upstream compatibility).
    """

    flag: str
    help: str
    default: Any = None
    type: Callable[[str], Any] = str
    kind: str = "value"
    metavar: str | tuple[str, ...] | None = None
    choices: Sequence[str] | None = None
    fallback_env: tuple[str, ...] = ()
    field: str = ""  # the RunOptions field, when not the flag's name

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.dest.upper()

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        env = " or ".join((self.env, *self.fallback_env))
        shown = self.default
        if isinstance(shown, bool):
            shown = "on" if shown else "off"
        elif isinstance(shown, tuple) and self.kind == "pair":
            shown = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in shown)
        elif isinstance(shown, tuple):
            shown = ":".join(map(str, shown))
        default = f"; default {shown}" if shown not in (None, "", []) else ""
        help_text = f"{self.help} [env {env}{default}]"
        # default=None: "not on the command line", resolved later from the environment or the default.
        if self.kind == "switch":
            parser.add_argument(self.flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif self.kind == "list":
            parser.add_argument(
                self.flag, action="append", default=None, type=self.type, metavar=self.metavar, help=help_text
            )
        elif self.kind == "pair":
            parser.add_argument(self.flag, nargs=2, default=None, type=self.type, metavar=self.metavar, help=help_text)
        else:
            parser.add_argument(
                self.flag, default=None, type=self.type, metavar=self.metavar, choices=self.choices, help=help_text
            )

    def resolve(self, given: Any, environ: Mapping[str, str]) -> tuple[Any, str | None]:
        """(value, error): the command line's value, else the environment's, else the default."""
        if given is not None:
            return (tuple(given) if self.kind == "pair" else given), None
        for name in (self.env, *self.fallback_env):
            raw = environ.get(name)
            if raw is None or (raw.strip() == "" and name != self.env):
                continue
            try:
                return self._convert(raw), None
            except (argparse.ArgumentTypeError, ValueError) as exc:
                return None, f"environment variable {name}: {exc}"
        return (list(self.default) if self.kind == "list" else self.default), None

    def _convert(self, raw: str) -> Any:
        if self.kind == "switch":
            return _switch(raw)
        convert = self.type
        if self.kind == "list":
            return [convert(item.strip()) for item in raw.split(",") if item.strip()]
        if self.kind == "pair":
            items = raw.replace(",", " ").split()
            if len(items) != 2:
                raise argparse.ArgumentTypeError(f"expected two values (A,B), got {raw!r}")
            return tuple(convert(item) for item in items)
        value = convert(raw)
        if self.choices is not None and value not in self.choices:
            raise argparse.ArgumentTypeError(f"invalid choice {raw!r} (choose from {', '.join(self.choices)})")
        return value


GLOBAL_OPTIONS = (
    Option("--log-level", "log level", "info", choices=("debug", "info", "warning", "error")),
    Option("--log-format", "log format (default: console on a terminal, json otherwise)", choices=("json", "console")),
)

# The flags of `run`. Each maps onto one field of controller.app.RunOptions (same name).
RUN_OPTIONS = (
    Option(
        "--kubeconfig",
        "kubeconfig file (default: in-cluster configuration, then $KUBECONFIG, then ~/.kube/config)",
        metavar="PATH",
    ),
    Option(
        "--namespace",
        "watch only this namespace (repeatable; default: all namespaces)",
        [],
        kind="list",
        metavar="NS",
        field="namespaces",
    ),
    Option(
        "--workers",
        "concurrent reconciles (a reconcile mostly waits on the API server, and a failover must not "
        "queue behind other jobs' work; see docs/benchmarks/profiles)",
        16,
        type=_positive_int,
        metavar="N",
    ),
    Option("--metrics-addr", "serve /metrics here", ("0.0.0.0", 8080), type=_addr, metavar="HOST:PORT"),
    Option("--health-addr", "serve /healthz and /readyz here", ("0.0.0.0", 8081), type=_addr, metavar="HOST:PORT"),
    Option(
        "--kube-api-qps",
        "client-side limit of API requests per second, watches included. 'auto': none when "
        "the API server runs API Priority and Fairness (its responses say so), else "
        f"{FALLBACK_KUBE_API_QPS:g}/s; a number is always honoured; 0 disables it (see docs/benchmarks/profiles)",
        DEFAULT_KUBE_API_QPS,
        type=_qps,
        metavar="QPS|auto",
    ),
    Option(
        "--kube-api-burst",
        "requests allowed at once above --kube-api-qps. 'auto': "
        f"{FALLBACK_KUBE_API_BURST} with an 'auto' QPS, else twice the QPS",
        DEFAULT_KUBE_API_BURST,
        type=_burst,
        metavar="N|auto",
    ),
    Option("--leader-elect", "hold a Lease so that only one replica acts", True, kind="switch"),
    Option(
        "--leader-election-namespace",
        "namespace of the Lease (default: the pod's namespace, else 'default')",
        metavar="NS",
    ),
    Option(
        "--leader-election-id",
        "name of the Lease; give each shard of a split cluster its own",
        "tfjob-controller",
        type=_object_name,
        metavar="NAME",
    ),
    Option(
        "--cluster-domain",
        "DNS suffix appended to the service addresses in TF_CONFIG (e.g. cluster.local)",
        "",
        type=_dns_suffix,
        metavar="DOMAIN",
        fallback_env=("CUSTOM_CLUSTER_DOMAIN",),
    ),
    Option(
        "--max-pods-per-job",
        "a job asking for more pods (all replica types together) fails validation",
        DecideConfig.max_pods_per_job,
        type=_positive_int,
        metavar="N",
    ),
    Option(
        "--failover-backoff",
        "back-off of repeated own failures (OOM-killed, error exit) of one dynamic worker index (the first, "
        "and every disruption, is replaced as soon as its pod is gone): BASE seconds before the second, "
        "doubling per failure up to CAP",
        (DecideConfig.failover_backoff_base, DecideConfig.failover_backoff_cap),
        type=_positive_float,
        kind="pair",
        metavar=("BASE", "CAP"),
    ),
    Option(
        "--gang-scheduler-name",
        "gang-schedule every job with this scheduler: a PodGroup per job, its pods "
        "scheduled all or nothing (volcano, or scheduler-plugins / scheduler-plugins-scheduler: the coscheduling "
        "plugin, whose name pods get); needs that scheduler's PodGroup CRD. Default: no gang scheduling",
        "",
        type=_gang_scheduler,
        metavar="NAME",
    ),
    Option(
        "--startup-timeout",
        "give up (exit 1) when the API server cannot be reached for this many seconds at start",
        30.0,
        type=_positive_float,
        metavar="SECONDS",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="tfjob-controller", description=__doc__.split("\n\n")[0])
    for option in GLOBAL_OPTIONS:
        option.add_to(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run the TFJob controller against a cluster",
        description="Run the TFJob controller. Every flag can also be set by the environment variable shown "
        "with it; the command line wins.",
    )
    for option in RUN_OPTIONS:
        option.add_to(run)

    sim = sub.add_parser("sim", help="serve a simulated Kubernetes cluster until SIGINT/SIGTERM")
    sim.add_argument("--port", type=_port, default=0, help="port to listen on (0 picks a free one)")
    sim.add_argument("--kubeconfig", required=True, metavar="PATH", help="write a kubeconfig for the cluster here")
    sim.add_argument("--nodes", type=_positive_int, default=3, help="Ready nodes (default 3)")
    sim.add_argument(
        "--time-scale",
        type=_scale,
        default=1.0,
        help="multiplier of simulated durations (pod start, grace periods); default 1",
    )
    sim.add_argument(
        "--secure",
        action="store_true",
        help="HTTPS with a generated CA, authentication (the kubeconfig's user is a cluster admin; "
        "ServiceAccount tokens via 'kubectl create token', used with 'kubectl --token') and "
        "RBAC authorization",
    )
    sim.add_argument(
        "--podgroup-crds",
        type=_gang_schedulers,
        default=(),
        metavar="SCHEDULERS",
        help="serve these gang schedulers' CRDs and schedule their pods: a comma-separated list of "
        "volcano (PodGroup and Queue of scheduling.volcano.sh) and scheduler-plugins (PodGroup of "
        "scheduling.x-k8s.io); default none, as on a cluster without a gang scheduler",
    )
    sim.add_argument(
        "--priority-and-fairness",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="API Priority and Fairness as kube-apiserver applies it by default: the bootstrap FlowSchemas and "
        "PriorityLevelConfigurations, requests classified, limited and queued by priority level (429 + "
        "Retry-After beyond), the X-Kubernetes-PF-* response headers, apiserver_flowcontrol_* on /metrics; "
        "--no-priority-and-fairness is a server with --enable-priority-and-fairness=false",
    )
    sim.add_argument(
        "--max-requests-inflight",
        type=_positive_int,
        default=400,
        metavar="N",
        help="kube-apiserver's flag: with the next one, the concurrency that API Priority and Fairness shares "
        "among priority levels (by nominalConcurrencyShares; requests beyond a level's share queue, then get "
        "429 + Retry-After); without APF, the limit of read-only requests at once; default 400",
    )
    sim.add_argument(
        "--max-mutating-requests-inflight",
        type=_positive_int,
        default=200,
        metavar="N",
        help="kube-apiserver's flag: added to --max-requests-inflight for APF; without APF, the limit of "
        "mutating requests at once; default 200",
    )
    sim.add_argument(
        "--request-timeout",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="kube-apiserver's flag: a request waits in an APF queue at most a quarter of its timeout "
        "(this, or its own shorter timeout parameter) before its 429; default 60",
    )

    sim.add_argument(
        "--runtime",
        choices=("annotations", "process"),
        default="annotations",
        help="the simulated kubelet's containers: 'annotations' (default; nothing runs, pod annotations "
        "steer exits and timings) or 'process' (each container's command runs as a real process in its "
        "pod's own network namespace, with cluster DNS; needs root)",
    )

    demo = sub.add_parser("demo", help="run the controller on an embedded simulated cluster and narrate a story")
    demo.add_argument(
        "--time-scale",
        type=_scale,
        default=None,
        help="simulated time multiplier (default 0.05; 1 with --tensorflow, whose processes take real time)",
    )
    demo.add_argument(
        "--tensorflow",
        action="store_true",
        help="the same story with real training: examples/dynamic-workers/ as real TensorFlow processes on the "
        "simulator's process runtime (needs root and TensorFlow: pip install -e '.[tensorflow]')",
    )

    sub.add_parser("crd", help="print the TFJob CustomResourceDefinition as YAML")
    return parser


def parse_args(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> argparse.Namespace:
    """Parse the command line, then fill every option not given there from the environment or its default."""
    parser = build_parser()
    args = parser.parse_args(argv)
    environ = os.environ if environ is None else environ
    options = GLOBAL_OPTIONS + (RUN_OPTIONS if args.command == "run" else ())
    for option in options:
        value, error = option.resolve(getattr(args, option.dest), environ)
        if error is not None:
            prog = f"{parser.prog} {args.command}" if option in RUN_OPTIONS else parser.prog
            parser.exit(2, f"{prog}: error: {error} (see {prog} --help)\n")
        setattr(args, option.dest, value)
    if args.command == "run" and args.failover_backoff[0] > args.failover_backoff[1]:
        prog = f"{parser.prog} run"
        parser.exit(2, f"{prog}: error: --failover-backoff: BASE must not exceed CAP (see {prog} --help)\n")
    return args


def run_options(args: argparse.Namespace) -> Any:
    from controller.app import RunOptions

    return RunOptions(**{option.field or option.dest: getattr(args, option.dest) for option in RUN_OPTIONS})


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from controller.ops.logging import configure_logging

    fmt = args.log_format or ("console" if sys.stderr.isatty() else "json")
    configure_logging(args.log_level, fmt)
    try:
        if args.command == "run":
            from controller.app import run
            from controller.ops.collector import tune_collector

            tune_collector()
            return anyio.run(run, run_options(args))
        if args.command in ("sim", "demo"):
            sim = _simulator()
            try:
                sim.require_extra(secure=getattr(args, "secure", False))
            except sim.MissingExtra as exc:
                raise SimulatorMissing(str(exc)) from None
        if args.command == "sim":
            from tfjob_sim.serve import serve_sim

            if args.runtime == "process":
                from tfjob_sim.process.runtime import RuntimeUnavailable, check_available

                try:
                    check_available()
                except RuntimeUnavailable as exc:
                    print(f"tfjob-controller sim: --runtime process: {exc}", file=sys.stderr)
                    return 2

            return anyio.run(
                serve_sim,
                args.port,
                args.kubeconfig,
                args.nodes,
                args.time_scale,
                args.secure,
                args.podgroup_crds,
                args.priority_and_fairness,
                args.max_requests_inflight,
                args.max_mutating_requests_inflight,
                args.request_timeout,
                args.runtime,
            )
        if args.command == "demo":
            if args.tensorflow:
                from tfjob_sim.demo_tensorflow import demo_tensorflow, preflight

                refusal = preflight()
                if refusal is not None:
                    print(f"tfjob-controller demo --tensorflow: {refusal[1]}", file=sys.stderr)
                    return refusal[0]
                return anyio.run(demo_tensorflow, args.time_scale)
            from tfjob_sim.demo import demo

            return anyio.run(demo, args.time_scale)
        if args.command == "crd":
            from controller.tfjob.crd import build_crd, to_yaml

            sys.stdout.write(to_yaml(build_crd()))
            return 0
    except KeyboardInterrupt:
        return 130
    except SimulatorMissing as exc:
        print(f"tfjob-controller {args.command}: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        # Expected operational failures: a missing kubeconfig, a port in use, a bad configuration value,
        # an API server that cannot be reached (controller.app.StartupError).
        print(f"tfjob-controller {args.command}: {exc}", file=sys.stderr)
        return 1
    raise AssertionError(f"unhandled command {args.command!r}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
