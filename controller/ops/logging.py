"""structlog configuration for every log line the program writes.

Controllers are read through log aggregators, so lines are JSON by default (one object per line,
with the object key bound into the context by the runtime); a console renderer is available for
people running the demo in a terminal. Standard-library logging (aiohttp, kubernetes-asyncio) is
routed through the same processors so nothing escapes unformatted.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    """Configure structlog and the stdlib root logger. ``fmt`` is ``json`` or ``console``."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}; use debug, info, warning or error")
    if fmt not in ("json", "console"):
        raise ValueError(f"unknown log format {fmt!r}; use json or console")

    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        # Calls below the level return at once: with stdlib's BoundLogger every call ran the whole
        # processor chain (timestamp, level, context) before the stdlib logger dropped it -- a create's
        # "created pod" info line and a dropped event's debug line in every burst (the cost per call is in
        # docs/benchmarks/profiles/README.md).
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info if fmt == "json" else (lambda _l, _m, e: e),
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
