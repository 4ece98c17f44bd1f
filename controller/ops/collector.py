"""The cyclic garbage collector's thresholds for the long-running commands (``run``, ``sim``).

Why: both processes hold tens of thousands of decoded JSON objects (the controller's informer caches,
the simulator's store) and allocate quickly while they serve a burst. With CPython's default young
generation (700 allocations) a 1,000-job burst ran ~850 young and 7-8 full collections in the controller
and ~2,100 young and 13 full in the simulator, the full ones walking every cached object: about 15 % of
the controller's CPU and a fifth of the simulator's (docs/benchmarks/profiles/README.md). Those objects
are JSON trees, which cannot form reference cycles and are freed by reference counting; the little
cyclic garbage a server makes (tasks, exceptions with their tracebacks) waits a little longer instead.
Full collections still follow CPython's own rule (only once the objects that survived since the last
one are a quarter of the long-lived heap), so no single pause grows; there are fewer of them.

Only the command-line entry points call :func:`tune_collector`: a library user (or a test process)
keeps the interpreter's defaults.
"""

from __future__ import annotations

import gc

COLLECTOR_THRESHOLDS = (50_000, 20, 10)


def tune_collector() -> None:
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
