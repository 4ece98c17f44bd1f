"""The simulator's commands on the ``tfjob-controller`` command line: ``sim`` and ``demo``.

Why here: the product must not know the simulator. The controller's command line finds these commands through
the ``tfjob_controller.commands`` entry-point group this distribution declares (sim/pyproject.toml), builds
their sub-parsers with :meth:`add_arguments` and runs :meth:`main`; so ``tfjob-controller sim`` and
``tfjob-controller demo`` work wherever the simulator is installed, and do not exist where it is not (the
controller's wheel and image). This module imports nothing heavy: the controller's ``--help`` loads it.
"""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass

import anyio

from controller.cli import CommandUnavailable, positive_float, positive_int, tcp_port

INSTALL_HINT = "install it from a checkout with: pip install -e '.[sim]'"


def _gang_schedulers(text: str) -> tuple[str, ...]:
    from tfjob_sim.crds import parse_schedulers

    try:
        return parse_schedulers(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _kubernetes_version(text: str) -> int:
    from tfjob_sim.versions import parse_kubernetes_version

    try:
        return parse_kubernetes_version(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _image_mapping(text: str) -> tuple[str, str]:
    from tfjob_sim.images import ImageMap, parse_mapping

    try:
        image, directory = parse_mapping(text)
        ImageMap({image: directory})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return image, directory


def _require_extra(secure: bool = False) -> None:
    """The simulator's optional modules, or :class:`CommandUnavailable` saying how to install them."""
    import tfjob_sim

    try:
        tfjob_sim.require_extra(secure=secure)
    except tfjob_sim.MissingExtra as exc:
        raise CommandUnavailable(str(exc)) from None


@dataclass(frozen=True)
class Sim:
    """``tfjob-controller sim``: serve a simulated cluster until SIGINT/SIGTERM."""

    name: str = "sim"
    help: str = "serve a simulated Kubernetes cluster until SIGINT/SIGTERM"

    def add_arguments(self, sim: argparse.ArgumentParser) -> None:
        """Declare every flag of ``sim`` on its sub-parser."""
        sim.add_argument("--port", type=tcp_port, default=0, help="port to listen on (0 picks a free one)")
        sim.add_argument("--kubeconfig", required=True, metavar="PATH", help="write a kubeconfig for the cluster here")
        sim.add_argument("--nodes", type=positive_int, default=3, help="Ready nodes (default 3)")
        sim.add_argument(
            "--time-scale",
            type=positive_float,
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
            help="API Priority and Fairness as kube-apiserver applies it by default: the bootstrap FlowSchemas "
            "and PriorityLevelConfigurations, requests classified, limited and queued by priority level (429 + "
            "Retry-After beyond), the X-Kubernetes-PF-* response headers, apiserver_flowcontrol_* on /metrics; "
            "--no-priority-and-fairness is a server with --enable-priority-and-fairness=false",
        )
        sim.add_argument(
            "--max-requests-inflight",
            type=positive_int,
            default=400,
            metavar="N",
            help="kube-apiserver's flag: with the next one, the concurrency that API Priority and Fairness "
            "shares among priority levels (by nominalConcurrencyShares; requests beyond a level's share queue, "
            "then get 429 + Retry-After); without APF, the limit of read-only requests at once; default 400",
        )
        sim.add_argument(
            "--max-mutating-requests-inflight",
            type=positive_int,
            default=200,
            metavar="N",
            help="kube-apiserver's flag: added to --max-requests-inflight for APF; without APF, the limit of "
            "mutating requests at once; default 200",
        )
        sim.add_argument(
            "--request-timeout",
            type=positive_float,
            default=60.0,
            metavar="SECONDS",
            help="kube-apiserver's flag: a request waits in an APF queue at most a quarter of its timeout "
            "(this, or its own shorter timeout parameter) before its 429; default 60",
        )
        sim.add_argument(
            "--kubernetes-version",
            type=_kubernetes_version,
            default=33,
            metavar="1.N",
            help="the Kubernetes release the API server behaves as: its /version and which CRD validation features "
            "it accepts (1.29 to 1.35; default 1.33)",
        )
        sim.add_argument(
            "--runtime",
            choices=("annotations", "process"),
            default="annotations",
            help="the simulated kubelet's containers: 'annotations' (default; nothing runs, pod annotations "
            "steer exits and timings) or 'process' (each container's command runs as a real process in its "
            "pod's own network namespace, with cluster DNS; needs root)",
        )
        sim.add_argument(
            "--image",
            dest="images",
            action="append",
            type=_image_mapping,
            default=[],
            metavar="IMAGE=DIR",
            help="with --runtime process: containers of IMAGE run with DIR/bin first on their PATH (DIR: a "
            "virtualenv or a prefix with what the image would have, e.g. "
            "--image tensorflow/tensorflow:2.21.0=$VIRTUAL_ENV); IMAGE matches as the container runtime "
            "normalises it (docker.io/, library/, :latest). Repeatable. A container of an image not mapped "
            "fails to pull (ErrImagePull, then ImagePullBackOff) unless its command is an absolute path",
        )

    def main(self, args: argparse.Namespace) -> int:
        """Serve until SIGINT/SIGTERM; 0 on a clean stop, 2 when ``--runtime process`` cannot run here.
        Raises :class:`CommandUnavailable` when the simulator's optional modules are missing."""
        _require_extra(secure=args.secure)
        from tfjob_sim.serve import serve_sim

        if args.images and args.runtime != "process":
            raise CommandUnavailable("--image: only --runtime process runs images", exit_code=2)
        if args.runtime == "process":
            from tfjob_sim.process.runtime import RuntimeUnavailable, check_available

            try:
                check_available()
            except RuntimeUnavailable as exc:
                raise CommandUnavailable(f"--runtime process: {exc}", exit_code=2) from None
        return anyio.run(
            functools.partial(serve_sim, image_map=dict(args.images)),
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
            args.kubernetes_version,
        )


@dataclass(frozen=True)
class Demo:
    """``tfjob-controller demo``: the controller on an embedded simulated cluster, narrated."""

    name: str = "demo"
    help: str = "run the controller on an embedded simulated cluster and narrate a story"

    def add_arguments(self, demo: argparse.ArgumentParser) -> None:
        """Declare ``--time-scale`` and ``--tensorflow``."""
        demo.add_argument(
            "--time-scale",
            type=positive_float,
            default=None,
            help="simulated time multiplier (default 0.05; 1 with --tensorflow, whose processes take real time)",
        )
        demo.add_argument(
            "--tensorflow",
            action="store_true",
            help="the same story with real training: examples/dynamic-workers/ as real TensorFlow processes on "
            "the simulator's process runtime (needs root and TensorFlow: pip install -e '.[tensorflow]')",
        )

    def main(self, args: argparse.Namespace) -> int:
        """Tell the story; 0 when it ended as told. Raises :class:`CommandUnavailable` when what the chosen
        story needs (the simulator's extra; root and TensorFlow for ``--tensorflow``) is missing."""
        _require_extra()
        if args.tensorflow:
            from tfjob_sim.demo_tensorflow import demo_tensorflow, preflight

            refusal = preflight()
            if refusal is not None:
                raise CommandUnavailable(refusal[1], exit_code=refusal[0], context="--tensorflow")
            return anyio.run(demo_tensorflow, args.time_scale)
        from tfjob_sim.demo import demo

        return anyio.run(demo, args.time_scale)


SIM = Sim()
DEMO = Demo()
