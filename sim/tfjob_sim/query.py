"""Query-parameter parsing shared by the HTTP handlers, with apimachinery's leniency and errors."""

from __future__ import annotations

from typing import Any

from tfjob_sim import errors


def parse_bool(value: str | None) -> bool:
    """apimachinery's lenient boolean: absent/"0"/"false" (any case) are false, anything else true."""
    if value is None:
        return False
    return not (value == "0" or value.lower() == "false")


def int_param(query: Any, name: str) -> int | None:
    """An integer parameter (None when absent or empty); the parameter codec's 400 otherwise."""
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(
            f'invalid value for {name}: strconv.ParseInt: parsing "{raw}": invalid syntax'
        ) from None
