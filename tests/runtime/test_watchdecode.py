"""The watch line decoder that leaves ``object.metadata.managedFields`` out: for any line, its result is
``orjson.loads(line)`` with that one value ``None`` (or untouched when it cannot tell it apart exactly)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from controller.runtime.watchdecode import loads_without_managed_fields

MANAGED = [
    {
        "manager": "kubelet",
        "operation": "Update",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:conditions": {'k:{"type":"Ready"}': {".": {}}}}},
    }
]


def event(obj: dict[str, Any], etype: str = "MODIFIED") -> bytes:
    return orjson.dumps({"type": etype, "object": obj})


def pod(**metadata: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7", **metadata},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"},
    }


def with_null_managed_fields(line: bytes) -> Any:
    expected = orjson.loads(line)
    expected["object"]["metadata"]["managedFields"] = None
    return expected


def test_managed_fields_become_none_and_everything_else_is_decoded():
    line = event(pod(managedFields=MANAGED, labels={"a": "b"}))
    assert loads_without_managed_fields(line) == with_null_managed_fields(line)


@pytest.mark.parametrize("position", ["first", "last"])
def test_position_of_managed_fields_in_metadata_does_not_matter(position):
    meta = {"managedFields": MANAGED, "name": "p"} if position == "first" else {"name": "p", "managedFields": MANAGED}
    line = event({"metadata": meta})
    assert loads_without_managed_fields(line) == with_null_managed_fields(line)


@pytest.mark.parametrize(
    "line",
    [
        event(pod()),  # no managedFields at all
        b'{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}}',
        b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}',
        # The key elsewhere than object.metadata is data, not managedFields.
        event({"metadata": {"name": "p"}, "spec": {"managedFields": MANAGED}}),
        b'{"type":"ADDED","object":"not an object","managedFields":[1]}',
        # Whitespace after the colon: not found byte for byte, so decoded in full.
        b'{"type":"ADDED","object":{"metadata":{"name":"p","managedFields": [{"manager":"m"}]}}}',
    ],
)
def test_lines_without_object_metadata_managed_fields_decode_exactly_as_orjson(line):
    assert loads_without_managed_fields(line) == orjson.loads(line)


def test_a_look_alike_before_metadata_is_never_nulled():
    # A key ending in `managedFields"` (escaped quote inside it), holding the very same value, comes first.
    obj = {"spec": {'x"managedFields': MANAGED}, "metadata": {"name": "p", "managedFields": MANAGED}}
    line = event(obj)
    assert line.find(b'"managedFields":') < line.find(b'"metadata"')
    decoded = loads_without_managed_fields(line)
    assert decoded["object"]["spec"] == {'x"managedFields': MANAGED}
    assert decoded["object"]["metadata"]["managedFields"] in (None, MANAGED)


def test_a_look_alike_that_is_a_longer_number_falls_back_to_a_full_decode():
    # The first match is followed by "12", which starts with the real value "1": nulling it would give
    # "null2"; the decoder must not fail on that, it decodes the line in full.
    line = b'{"type":"ADDED","object":{"spec":{"x\\"managedFields":12},"metadata":{"name":"p","managedFields":1}}}'
    assert loads_without_managed_fields(line) == orjson.loads(line)


def test_invalid_json_raises_orjsons_error():
    with pytest.raises(orjson.JSONDecodeError):
        loads_without_managed_fields(b'{"type":"ADDED","object":{"metadata":{"managedFields":[}}')
