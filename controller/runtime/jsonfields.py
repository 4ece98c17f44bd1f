"""Typed reads of one field of a JSON object nobody has validated yet (an object as the API returned it).

``x.get(k) if isinstance(x.get(k), dict) else {}`` reads the field twice and leaves its type unknown to a type
checker; these read it once and return the type the caller relies on, or the empty value of that type.
(The simulator, which builds on this package, reads request bodies and CRDs with them too.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def field_dict(obj: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` if it is a JSON object, else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def field_str(obj: Mapping[str, Any], key: str) -> str:
    """``obj[key]`` if it is a string, else ``""``."""
    value = obj.get(key)
    return value if isinstance(value, str) else ""
