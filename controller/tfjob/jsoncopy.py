"""A deep copy of a JSON document, for the objects the TFJob domain copies on every reconcile.

Why not ``copy.deepcopy``: what the domain copies comes from the API (the job to default, its old status,
a replica's pod template), plain dicts, lists and scalars decoded from JSON. deepcopy's memo and
per-node dispatch cost far more than this walk, and the job is copied on every reconcile and a template
once per pod created (the figures are in docs/benchmarks/profiles/README.md). Anything
that is not plain JSON is still handed to deepcopy, so the copy is exact whatever the input.
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar, cast

_ATOMS = frozenset({str, int, float, bool, type(None)})

T = TypeVar("T")


def json_copy(obj: T) -> T:
    """A copy of ``obj`` equal to it (of the same type) that shares no dict or list with it."""
    return cast(T, _copy(obj))  # a copy has the type of its original


def _copy(obj: Any) -> Any:
    kind = type(obj)
    if kind is dict:
        return {key: _copy(value) for key, value in obj.items()}
    if kind is list:
        return [_copy(value) for value in obj]
    if kind in _ATOMS:
        return obj
    return copy.deepcopy(obj)
