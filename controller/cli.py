"""The ``tfjob-controller`` command line: ``run`` (the controller), ``crd`` (print the CRD), and the commands
other installed distributions add through the ``tfjob_controller.commands`` entry-point group (the simulated
cluster adds ``sim`` and ``demo``; the controller's wheel and image carry none).

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
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any, NoReturn, Protocol

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
from controller.version import version

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


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def tcp_port(text: str) -> int:
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


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


class CommandUnavailable(RuntimeError):
    """A command cannot run here: something it needs is not installed or not allowed. The message is the one
    line the user sees, after ``tfjob-controller COMMAND[ CONTEXT]:``; ``exit_code`` is the process's."""

    def __init__(self, message: str, *, exit_code: int = 1, context: str = "") -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.context = context


class Command(Protocol):
    """A command another distribution adds (an entry point of :data:`COMMANDS_GROUP` names an object like this)."""

    @property
    def name(self) -> str:
        """The sub-command's name on the command line."""
        ...

    @property
    def help(self) -> str:
        """One line for ``tfjob-controller --help``."""
        ...

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare the command's flags on its sub-parser."""

    def main(self, args: argparse.Namespace) -> int:
        """Run the command with the parsed arguments; return the exit code, or raise :class:`CommandUnavailable`."""
        ...


COMMANDS_GROUP = "tfjob_controller.commands"
BUILT_IN_COMMANDS = ("run", "crd")
# Commands that come from another distribution, and what to tell a user who asks for one that is not installed:
# the simulated cluster is its own distribution (sim/, the [sim] extra) so that neither the controller's wheel
# nor its image carries it.
OPTIONAL_COMMANDS = {
    name: "the simulated cluster is not installed{why}; install it from a checkout with: pip install -e '.[sim]'"
    for name in ("sim", "demo")
}


@dataclass(frozen=True)
class Extensions:
    """The commands installed distributions add, and those whose entry point could not be loaded (with why)."""

    commands: dict[str, Command]
    broken: dict[str, str]


def load_extensions() -> Extensions:
    """Load every entry point of :data:`COMMANDS_GROUP`; one that fails to import is recorded, never raised."""
    commands: dict[str, Command] = {}
    broken: dict[str, str] = {}
    for entry in metadata.entry_points(group=COMMANDS_GROUP):
        try:
            command = entry.load()
        except ImportError as exc:
            broken[entry.name] = f"{type(exc).__name__}: {exc}"
            continue
        commands[entry.name] = command
    return Extensions(commands, broken)


def _command_of(argv: Sequence[str]) -> str | None:
    """The sub-command ``argv`` asks for (the first word that is neither a global option nor its value)."""
    takes_value = {option.flag for option in GLOBAL_OPTIONS if option.takes_value}
    words = iter(argv)
    for word in words:
        if word in takes_value:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


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
_burst = _auto_or(positive_int)  # --kube-api-burst


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

    @property
    def takes_value(self) -> bool:
        """Whether the flag reads the next word of the command line as its value."""
        return self.kind != "switch"

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
        type=positive_int,
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
        type=positive_int,
        metavar="N",
    ),
    Option(
        "--failover-backoff",
        "back-off of repeated own failures (OOM-killed, error exit) of one dynamic worker index (the first, "
        "and every disruption, is replaced as soon as its pod is gone): BASE seconds before the second, "
        "doubling per failure up to CAP",
        (DecideConfig.failover_backoff_base, DecideConfig.failover_backoff_cap),
        type=positive_float,
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
        type=positive_float,
        metavar="SECONDS",
    ),
)


def build_parser(extensions: Extensions | None = None) -> argparse.ArgumentParser:
    """The whole command line: the built-in commands, and those ``extensions`` add."""
    parser = OneLineParser(prog="tfjob-controller", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
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

    for command in (extensions.commands if extensions is not None else {}).values():
        command.add_arguments(sub.add_parser(command.name, help=command.help))

    sub.add_parser("crd", help="print the TFJob CustomResourceDefinition as YAML")
    return parser


def parse_args(
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    extensions: Extensions | None = None,
) -> argparse.Namespace:
    """Parse the command line, then fill every option not given there from the environment or its default.
    ``extensions``: the added commands, loaded here when None and ``argv`` asks for a command that is not built in.
    A usage error exits 2 with one line (argparse's ``SystemExit``)."""
    if extensions is None and _command_of(list(sys.argv[1:] if argv is None else argv)) not in BUILT_IN_COMMANDS:
        extensions = load_extensions()
    parser = build_parser(extensions)
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
    """Run the command line; the process's exit code. Expected failures end in one line on stderr."""
    argv = list(sys.argv[1:] if argv is None else argv)
    wanted = _command_of(argv)
    extensions = None
    if wanted not in BUILT_IN_COMMANDS:  # an added command, or --help / --version / nothing
        extensions = load_extensions()
        if wanted in OPTIONAL_COMMANDS and wanted not in extensions.commands:
            why = extensions.broken.get(wanted)
            message = OPTIONAL_COMMANDS[wanted].format(why=f" ({why})" if why else "")
            print(f"tfjob-controller {wanted}: {message}", file=sys.stderr)
            return 1
    args = parse_args(argv, extensions=extensions)
    from controller.ops.logging import configure_logging

    fmt = args.log_format or ("console" if sys.stderr.isatty() else "json")
    configure_logging(args.log_level, fmt)
    try:
        if args.command == "run":
            from controller.app import run
            from controller.ops.collector import tune_collector

            tune_collector()
            return anyio.run(run, run_options(args))
        if args.command == "crd":
            from controller.tfjob.crd import build_crd, to_yaml

            sys.stdout.write(to_yaml(build_crd()))
            return 0
        assert extensions is not None
        return extensions.commands[args.command].main(args)
    except KeyboardInterrupt:
        return 130
    except CommandUnavailable as exc:
        where = f"{args.command} {exc.context}" if exc.context else args.command
        print(f"tfjob-controller {where}: {exc}", file=sys.stderr)
        return exc.exit_code
    except (OSError, ValueError) as exc:
        # Expected operational failures: a missing kubeconfig, a port in use, a bad configuration value,
        # an API server that cannot be reached (controller.app.StartupError).
        print(f"tfjob-controller {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
