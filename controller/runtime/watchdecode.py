"""Decoding a watch event line without building ``object.metadata.managedFields``.

Why: every object a real apiserver sends carries ``metadata.managedFields`` (one entry per field manager,
each a nested map of every field it owns): a large share of the bytes of an event and of orjson's decoding
work (nested dicts, one string per field path; docs/benchmarks/informer.md times the same stream with and
without it), and an informer whose transform drops it builds all of that only to free it again. This decoder
leaves it out instead.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

__all__ = ["loads_without_managed_fields"]

_KEY = b'"managedFields":'


class _Metadata(msgspec.Struct):
    managedFields: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET  # noqa: N815 (the JSON field name)


class _Object(msgspec.Struct):
    metadata: _Metadata = msgspec.field(default_factory=_Metadata)


class _Event(msgspec.Struct):
    object: _Object = msgspec.field(default_factory=_Object)


_span_decoder = msgspec.json.Decoder(_Event)


def loads_without_managed_fields(line: bytes) -> Any:
    """``orjson.loads(line)`` for a watch event line, with ``object.metadata.managedFields`` (if any) decoded
    as ``None`` instead of its value. Invalid JSON raises :class:`orjson.JSONDecodeError`, as orjson does.

    How, exactly and not by pattern-matching: msgspec decodes the line against a schema that names only
    ``object.metadata.managedFields`` (as :class:`msgspec.Raw`: the value's exact JSON text, validated but
    not built). That text, found right after a ``"managedFields":`` key, is replaced by ``null`` and orjson
    decodes the rest; the result must have ``object.metadata.managedFields`` ``None`` (the value replaced was
    that one). Anything else — no managedFields, not a JSON event, whitespace after the colon, a failed
    check — falls back to decoding the whole line with orjson.
    """
    loads = orjson.loads
    start = line.find(_KEY)
    if start < 0:
        return loads(line)
    try:
        span = _span_decoder.decode(line).object.metadata.managedFields
    except msgspec.MsgspecError:
        return loads(line)  # not an event with an object and metadata: orjson decodes (or reports) it
    if span is msgspec.UNSET:
        return loads(line)
    size = len(span)
    while start >= 0:
        end = start + len(_KEY)
        if line.startswith(span, end):  # msgspec.Raw is a bytes-like buffer: compared without a copy
            # A look-alike (the same text after a key that merely ends in managedFields", or the prefix of a
            # longer number) can yield invalid JSON or null another value: both fall back below.
            try:
                event = loads(b"".join((line[:end], b"null", line[end + size :])))
                if event["object"]["metadata"].get("managedFields", ()) is None:
                    return event
            except (orjson.JSONDecodeError, TypeError, KeyError, AttributeError):
                pass
            break
        start = line.find(_KEY, end)
    return loads(line)
