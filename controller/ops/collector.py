"""The cyclic garbage collector's thresholds for the long-running commands (``run``, ``sim``).

Why: both processes hold tens of thousands of decoded JSON objects (the controller's informer caches,
the simulator's store) and allocate quickly while they serve a burst. With CPython's default young
generation (700 allocations) a burst runs hundreds of young and several full collections, the full ones
walking every cached object: the largest single CPU item of both processes in the profiles of
docs/benchmarks/profiles/README.md, which holds the counts and shares. Those objects
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
    """Set the process's collector thresholds to :data:`COLLECTOR_THRESHOLDS` (young generation every
    50,000 allocations); for the long-running commands only."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
