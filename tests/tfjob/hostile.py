"""Any JSON value, for the hostile-input property tests of the TFJob domain (hypothesis strategies).

Biased towards the shapes a TFJob, a pod or a service has (replica types, restart policies, condition
strings, timestamps), with unicode, control and bidi characters, long strings and big numbers: what an
object stored past the CRD's rules, or decoded from a misbehaving server, can hold in any field.

Two flavours: :data:`json_values` for the pure functions (anything a decoder can hand over, NaN,
infinities and 64-bit integers included), :data:`stored_json_values` for objects sent to an API server,
which stores JSON as sent (no NaN or infinity; integers a JSON number carries exactly).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

WORDS = (
    "",
    "Worker",
    "worker",
    "PS",
    "Chief",
    "Master",
    "Evaluator",
    "Never",
    "OnFailure",
    "Always",
    "ExitCode",
    "AllWorkers",
    "True",
    "False",
    "tensorflow",
    "Running",
    "Failed",
    "Succeeded",
    "2024-01-01T00:00:00Z",
    "not-a-time",
    "\u0000",
    "\u202e",
    "ワーカー",
    "\U0001f680",
    "\U0001f680" * 40,
    "a" * 300,
)


def _scalars(integers: st.SearchStrategy[int], floats: st.SearchStrategy[float]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.booleans(), integers, floats, st.text(max_size=20), st.sampled_from(WORDS))


def _json(scalars: st.SearchStrategy[Any], max_leaves: int) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
        max_leaves=max_leaves,
    )


scalars = _scalars(st.integers(min_value=-(2**63), max_value=2**63), st.floats(allow_nan=True, allow_infinity=True))
json_values = _json(scalars, max_leaves=25)

# Fewer leaves: each stored value is a real object the API server and the controller handle end to end.
stored_scalars = _scalars(st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False))
stored_json_values = _json(stored_scalars, max_leaves=12)


def deep(depth: int) -> dict[str, Any]:
    """A JSON object nested ``depth`` levels deep (where a template or a container's env should be)."""
    node: dict[str, Any] = {"leaf": "x"}
    for _ in range(depth):
        node = {"nested": node}
    return node
