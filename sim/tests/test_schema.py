"""Structural schemas: the exact causes kube-apiserver returns, pruning, defaulting, CRD validation."""

from __future__ import annotations

import copy

import pytest

from tfjob_sim import schema_values
from tfjob_sim.errors import invalid
from tfjob_sim.gotext import go_json, go_quote
from tfjob_sim.schema import StructuralSchema, validate_crd

BLOCKED = {
    "reason": "FieldValueInvalid",
    "field": "<nil>",
    "message": "Invalid value: null: some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation",
}

CONTAINER = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "image": {"type": "string"}},
}
REPLICA_SPEC = {
    "type": "object",
    "x-kubernetes-validations": [
        {
            "rule": "self.template.spec.containers.exists(c, c.name == 'tensorflow')",
            "message": "a container named tensorflow is required",
        },
    ],
    "properties": {
        "replicas": {"type": "integer", "format": "int32", "minimum": 0},
        "restartPolicy": {"type": "string", "enum": ["Always", "OnFailure", "Never", "ExitCode"]},
        "template": {
            "type": "object",
            "properties": {
                "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "spec": {
                    "type": "object",
                    "properties": {
                        "containers": {
                            "type": "array",
                            "items": CONTAINER,
                            "x-kubernetes-validations": [
                                {
                                    "rule": "self.all(c, has(c.image) && size(c.image) > 0)",
                                    "message": "every container needs an image",
                                }
                            ],
                        },
                    },
                },
            },
        },
    },
}
TFJOB_SCHEMA = {
    "type": "object",
    "x-kubernetes-validations": [
        {
            "rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",
            "message": "metadata.name must be a DNS-1035 label",
        },
    ],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["tfReplicaSpecs"],
            "properties": {
                "tfReplicaSpecs": {
                    "type": "object",
                    "additionalProperties": REPLICA_SPEC,
                    "x-kubernetes-validations": [
                        {"rule": "!(has(self.Chief) && has(self.Master))", "message": "at most one of Chief or Master"},
                    ],
                },
                "runPolicy": {
                    "type": "object",
                    "properties": {
                        "cleanPodPolicy": {"type": "string", "enum": ["All", "Running", "None"]},
                        "suspend": {"type": "boolean", "default": False},
                        "backoffLimit": {"type": "integer", "format": "int32", "minimum": 0},
                        "schedulingPolicy": {
                            "type": "object",
                            "properties": {
                                "queue": {
                                    "type": "string",
                                    "x-kubernetes-validations": [
                                        {
                                            "rule": "self == oldSelf",
                                            "message": "spec.runPolicy.schedulingPolicy.queue is immutable",
                                        }
                                    ],
                                },
                                "minResources": {
                                    "type": "object",
                                    "additionalProperties": {
                                        "anyOf": [{"type": "integer"}, {"type": "string"}],
                                        "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
                                        "x-kubernetes-int-or-string": True,
                                    },
                                },
                            },
                        },
                    },
                },
                "successPolicy": {"type": "string", "enum": ["", "AllWorkers"]},
                "enableDynamicWorker": {"type": "boolean"},
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "conditions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["type", "status"],
                        "properties": {
                            "type": {"type": "string"},
                            "status": {"type": "string"},
                            "lastTransitionTime": {"type": "string", "format": "date-time"},
                        },
                    },
                },
                "dynamicWorkers": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
    },
}


def tfjob(**spec: object) -> dict:
    body = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "mnist", "namespace": "default"},
        "spec": {
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf:2"}]}},
                }
            }
        },
    }
    body["spec"].update(spec)
    return body


@pytest.fixture(scope="module")
def tf() -> StructuralSchema:
    return StructuralSchema(TFJOB_SCHEMA)


def cause(field: str, reason: str, message: str) -> dict:
    return {"reason": reason, "message": message, "field": field}


def test_valid_tfjob(tf: StructuralSchema) -> None:
    assert tf.validate(tfjob()) == []


# -- schema error forms ----------------------------------------------------------------------------------


def _set(path: str, value: object):
    def mutate(obj: dict) -> None:
        parts = path.split(".")
        target = obj
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        pytest.param(
            lambda o: o["spec"].pop("tfReplicaSpecs"),
            [cause("spec.tfReplicaSpecs", "FieldValueRequired", "Required value"), BLOCKED],
            id="required",
        ),
        pytest.param(
            _set("spec.tfReplicaSpecs.Worker.replicas", "two"),
            [
                cause(
                    "spec.tfReplicaSpecs.Worker.replicas",
                    "FieldValueTypeInvalid",
                    'Invalid value: "string": spec.tfReplicaSpecs.Worker.replicas in body must be of type integer: "string"',
                ),
                BLOCKED,
            ],
            id="type",
        ),
        pytest.param(
            _set("spec.tfReplicaSpecs.Worker.replicas", -1),
            [
                cause(
                    "spec.tfReplicaSpecs.Worker.replicas",
                    "FieldValueInvalid",
                    "Invalid value: -1: spec.tfReplicaSpecs.Worker.replicas in body should be greater than or equal to 0",
                )
            ],
            id="minimum",
        ),
        pytest.param(
            _set("spec.tfReplicaSpecs.Worker.restartPolicy", "Sometimes"),
            [
                cause(
                    "spec.tfReplicaSpecs.Worker.restartPolicy",
                    "FieldValueNotSupported",
                    'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never", "ExitCode"',
                ),
                BLOCKED,
            ],
            id="enum",
        ),
        pytest.param(
            _set("spec.successPolicy", 3),
            [
                cause(
                    "spec.successPolicy",
                    "FieldValueTypeInvalid",
                    'Invalid value: "integer": spec.successPolicy in body must be of type string: "integer"',
                ),
                cause(
                    "spec.successPolicy",
                    "FieldValueNotSupported",
                    'Unsupported value: 3: supported values: "", "AllWorkers"',
                ),
                BLOCKED,
            ],
            id="type-and-enum",
        ),
        pytest.param(
            _set("spec.enableDynamicWorker", None),
            [
                cause(
                    "spec.enableDynamicWorker",
                    "FieldValueTypeInvalid",
                    'Invalid value: "null": spec.enableDynamicWorker in body must be of type boolean: "null"',
                ),
                BLOCKED,
            ],
            id="null",
        ),
        pytest.param(
            _set("spec.runPolicy", {"schedulingPolicy": {"minResources": {"cpu": "lots", "memory": "1Gi", "gpu": 2}}}),
            [
                cause(
                    "spec.runPolicy.schedulingPolicy.minResources.cpu",
                    "FieldValueInvalid",
                    'Invalid value: "lots": spec.runPolicy.schedulingPolicy.minResources.cpu in body should match '
                    "'"
                    + r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
                    + "'",
                )
            ],
            id="quantity-pattern",
        ),
        pytest.param(
            _set("spec.runPolicy", {"schedulingPolicy": {"minResources": {"cpu": True}}}),
            [
                cause(
                    "spec.runPolicy.schedulingPolicy.minResources.cpu",
                    "FieldValueTypeInvalid",
                    'Invalid value: "boolean": spec.runPolicy.schedulingPolicy.minResources.cpu in body must be of type integer,string: "boolean"',
                ),
                cause(
                    "<nil>",
                    "FieldValueInvalid",
                    'Invalid value: "": "spec.runPolicy.schedulingPolicy.minResources.cpu" must validate at least one schema (anyOf)',
                ),
                cause(
                    "spec.runPolicy.schedulingPolicy.minResources.cpu",
                    "FieldValueTypeInvalid",
                    'Invalid value: "boolean": spec.runPolicy.schedulingPolicy.minResources.cpu in body must be of type integer: "boolean"',
                ),
                BLOCKED,
            ],
            id="int-or-string-anyOf",
        ),
        pytest.param(
            lambda o: o["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append({"image": "x"}),
            [
                cause(
                    "spec.tfReplicaSpecs.Worker.template.spec.containers[1].name",
                    "FieldValueRequired",
                    "Required value",
                ),
                BLOCKED,
            ],
            id="required-in-list-item",
        ),
    ],
)
def test_schema_error_forms(tf: StructuralSchema, mutate, expected: list[dict]) -> None:
    obj = tfjob()
    mutate(obj)
    assert tf.validate(obj) == expected


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        (
            {"type": "string", "maxLength": 2},
            "abc",
            cause("x", "FieldValueTooLong", "Too long: may not be more than 2 bytes"),
        ),
        (
            {"type": "string", "maxLength": 1},
            "abc",
            cause("x", "FieldValueTooLong", "Too long: may not be more than 1 bytes"),
        ),
        (
            {"type": "string", "minLength": 3},
            "ab",
            cause("x", "FieldValueInvalid", 'Invalid value: "ab": x in body should be at least 3 chars long'),
        ),
        (
            {"type": "string", "pattern": "^a"},
            "b",
            cause("x", "FieldValueInvalid", "Invalid value: \"b\": x in body should match '^a'"),
        ),
        (
            {"type": "array", "maxItems": 2, "items": {"type": "string"}},
            ["a", "b", "c"],
            cause("x", "FieldValueTooMany", "Too many: 3: must have at most 2 items"),
        ),
        (
            {"type": "array", "minItems": 2, "items": {"type": "string"}},
            ["a"],
            cause("x", "FieldValueInvalid", "Invalid value: 1: x in body should have at least 2 items"),
        ),
        (
            {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}},
            {"a": "1", "b": "2"},
            cause("x", "FieldValueTooMany", "Too many: 2: must have at most 1 items"),
        ),
        (
            {"type": "integer", "maximum": 10},
            11,
            cause("x", "FieldValueInvalid", "Invalid value: 11: x in body should be less than or equal to 10"),
        ),
        (
            {"type": "integer", "maximum": 10, "exclusiveMaximum": True},
            10,
            cause("x", "FieldValueInvalid", "Invalid value: 10: x in body should be less than 10"),
        ),
        (
            {"type": "integer", "minimum": 1, "exclusiveMinimum": True},
            1,
            cause("x", "FieldValueInvalid", "Invalid value: 1: x in body should be greater than 1"),
        ),
        (
            {"type": "number", "minimum": 0.5},
            0.25,
            cause("x", "FieldValueInvalid", "Invalid value: 0.25: x in body should be greater than or equal to 0.5"),
        ),
        (
            {"type": "integer", "multipleOf": 3},
            4,
            cause("x", "FieldValueInvalid", "Invalid value: 4: x in body should be a multiple of 3"),
        ),
        (
            {"type": "integer"},
            1.5,
            cause("x", "FieldValueTypeInvalid", 'Invalid value: "number": x in body must be of type integer: "number"'),
        ),
        (
            {"type": "string", "format": "date-time"},
            "yesterday",
            cause(
                "x",
                "FieldValueTypeInvalid",
                'Invalid value: "yesterday": x in body must be of type date-time: "yesterday"',
            ),
        ),
        (
            {"type": "string", "enum": [1, "b"]},
            "c",
            cause("x", "FieldValueNotSupported", 'Unsupported value: "c": supported values: "1", "b"'),
        ),
    ],
)
def test_value_constraints(schema: dict, value: object, expected: dict) -> None:
    s = StructuralSchema({"type": "object", "properties": {"x": schema}})
    assert s.validate({"x": value}) == [expected]


def test_accepts_valid_values() -> None:
    s = StructuralSchema(
        {
            "type": "object",
            "properties": {
                "n": {"type": "number"},
                "i": {"type": "integer", "format": "int64"},
                "t": {"type": "string", "format": "date-time"},
                "q": {"x-kubernetes-int-or-string": True},
                "u": {"type": "string", "nullable": True},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        }
    )
    assert (
        s.validate({"n": 1, "i": 2.0, "t": "2024-05-01T12:34:56.123Z", "q": "50%", "u": None, "free": {"x": [1]}}) == []
    )
    assert s.validate({"q": 3}) == []


SHORTCUT_SCHEMAS = [
    {"type": "string"},
    {"type": "boolean"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "integer", "format": "int32"},
    {"type": "string", "nullable": True, "description": "d"},
    {},
    {"type": "object"},
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
    {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
    {"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 1},
    {"type": "array", "items": {"type": "string"}},
    {"x-kubernetes-int-or-string": True},
    {"type": "string", "enum": ["a"]},
]
SHORTCUT_VALUES = [
    "s",
    "",
    True,
    0,
    -5,
    2**31,
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    1.5,
    2.0,
    None,
    {},
    {"a": "x"},
    {"a": 1},
    {"b": 2, "c": 3},
    ["x"],
    [1],
]


@pytest.mark.parametrize("minor", [30, 36])
def test_the_shortcuts_for_plain_leaves_and_objects_answer_as_the_full_check(
    minor: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    def results() -> list[list[dict]]:
        return [
            StructuralSchema({"type": "object", "properties": {"x": sch}}, server_minor=minor).validate({"x": v})
            for sch in SHORTCUT_SCHEMAS
            for v in SHORTCUT_VALUES
        ]

    fast = results()
    monkeypatch.setattr(schema_values, "_plainly_valid", lambda value, schema: False)
    monkeypatch.setattr(schema_values, "_NON_OBJECT_KEYWORDS", frozenset({"type"}))
    assert results() == fast
    assert sum(1 for r in fast if r) > len(fast) // 2  # the matrix exercises errors, not only passes


def test_singular_units_from_134() -> None:
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string", "maxLength": 1},
            "l": {"type": "array", "maxItems": 1, "items": {"type": "integer"}},
        },
    }
    assert StructuralSchema(schema, server_minor=34).validate({"s": "ab", "l": [1, 2]}) == [
        cause("s", "FieldValueTooLong", "Too long: may not be more than 1 byte"),
        cause("l", "FieldValueTooMany", "Too many: 2: must have at most 1 item"),
    ]


def test_k8s_name_formats_from_134() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "string", "format": "k8s-short-name"}}}
    assert StructuralSchema(schema).validate({"n": "a-"}) == []  # unknown format before 1.34: ignored
    assert StructuralSchema(schema, server_minor=34).validate({"n": "a-"}) == [
        cause("n", "FieldValueTypeInvalid", 'Invalid value: "a-": n in body must be of type k8s-short-name: "a-"')
    ]


def test_int32_range_checked_from_136_only() -> None:
    schema = {"type": "object", "properties": {"r": {"type": "integer", "format": "int32"}}}
    assert StructuralSchema(schema).validate({"r": 2**31}) == []
    assert StructuralSchema(schema, server_minor=36).validate({"r": 2**31}) == [
        cause(
            "<nil>",
            "FieldValueInvalid",
            'Invalid value: "": Checked value must be of type integer with format int32 in r',
        )
    ]


# -- CEL through the schema ------------------------------------------------------------------------------


def test_cel_rule_failures_name_the_rule_node(tf: StructuralSchema) -> None:
    obj = tfjob()
    specs = obj["spec"]["tfReplicaSpecs"]
    specs["Chief"] = {"template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}}}
    specs["Master"] = {"template": {"spec": {"containers": [{"name": "main", "image": ""}]}}}
    obj["metadata"]["name"] = "MNIST"
    assert tf.validate(obj) == [
        cause("<nil>", "FieldValueInvalid", 'Invalid value: "object": metadata.name must be a DNS-1035 label'),
        cause("spec.tfReplicaSpecs", "FieldValueInvalid", 'Invalid value: "object": at most one of Chief or Master'),
        cause(
            "spec.tfReplicaSpecs[Master]",
            "FieldValueInvalid",
            'Invalid value: "object": a container named tensorflow is required',
        ),
        cause(
            "spec.tfReplicaSpecs[Master].template.spec.containers",
            "FieldValueInvalid",
            'Invalid value: "array": every container needs an image',
        ),
    ]


def test_cel_failure_values_from_135(tf: StructuralSchema) -> None:
    s135 = StructuralSchema(TFJOB_SCHEMA, server_minor=35)
    obj = tfjob()
    obj["spec"]["tfReplicaSpecs"]["Master"] = obj["spec"]["tfReplicaSpecs"]["Worker"]
    obj["spec"]["tfReplicaSpecs"]["Chief"] = obj["spec"]["tfReplicaSpecs"]["Worker"]
    assert s135.validate(obj) == [
        cause("spec.tfReplicaSpecs", "FieldValueInvalid", "Invalid value: at most one of Chief or Master")
    ]
    old = tfjob(runPolicy={"schedulingPolicy": {"queue": "a"}})
    new = tfjob(runPolicy={"schedulingPolicy": {"queue": "b"}})
    assert s135.validate(new, old) == [
        cause(
            "spec.runPolicy.schedulingPolicy.queue",
            "FieldValueInvalid",
            'Invalid value: "b": spec.runPolicy.schedulingPolicy.queue is immutable',
        )
    ]


def test_transition_rule_runs_only_on_update_with_an_old_value(tf: StructuralSchema) -> None:
    old = tfjob(runPolicy={"schedulingPolicy": {"queue": "a"}})
    new = tfjob(runPolicy={"schedulingPolicy": {"queue": "b"}})
    assert tf.validate(new) == []  # create: no oldSelf
    assert tf.validate(new, tfjob()) == []  # the field did not exist before
    assert tf.validate(copy.deepcopy(old), old) == []
    assert tf.validate(new, old) == [
        cause(
            "spec.runPolicy.schedulingPolicy.queue",
            "FieldValueInvalid",
            'Invalid value: "string": spec.runPolicy.schedulingPolicy.queue is immutable',
        )
    ]


def test_rule_referencing_a_missing_field_reports_evaluation_error() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"w": {"type": "object", "properties": {"replicas": {"type": "integer"}}}},
                "x-kubernetes-validations": [
                    {"rule": "self.w.replicas > 0"},
                    {"rule": "self.w.replicas > 0", "message": "needs workers"},
                ],
            }
        },
    }
    s = StructuralSchema(schema)
    assert s.validate({"spec": {"w": {}}}) == [
        cause(
            "spec",
            "FieldValueInvalid",
            'Invalid value: "object": no such key: replicas evaluating rule: self.w.replicas > 0',
        ),
        cause(
            "spec", "FieldValueInvalid", 'Invalid value: "object": no such key: replicas evaluating rule: needs workers'
        ),
    ]
    assert s.validate({"spec": {"w": {"replicas": 0}}}) == [
        cause("spec", "FieldValueInvalid", 'Invalid value: "object": failed rule: self.w.replicas > 0'),
        cause("spec", "FieldValueInvalid", 'Invalid value: "object": needs workers'),
    ]


def test_rule_reason_field_path_and_message_expression() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}},
                "x-kubernetes-validations": [
                    {
                        "rule": "self.min <= self.max",
                        "fieldPath": ".min",
                        "reason": "FieldValueForbidden",
                        "message": "min > max",
                    },
                    {
                        "rule": "self.min <= self.max",
                        "messageExpression": "'min ' + string(self.min) + ' exceeds max ' + string(self.max)",
                    },
                    {"rule": "self.min <= self.max", "reason": "FieldValueRequired"},
                ],
            }
        },
    }
    assert StructuralSchema(schema).validate({"spec": {"min": 5, "max": 1}}) == [
        cause("spec.min", "FieldValueForbidden", "Forbidden: min > max"),
        cause("spec", "FieldValueInvalid", 'Invalid value: "object": min 5 exceeds max 1'),
        cause("spec", "FieldValueRequired", "Required value: failed rule: self.min <= self.max"),
    ]


def test_no_such_overload_message() -> None:
    schema = {
        "type": "object",
        "properties": {"q": {"x-kubernetes-int-or-string": True, "x-kubernetes-validations": [{"rule": "self > 1"}]}},
    }
    assert StructuralSchema(schema).validate({"q": "a"}) == [
        cause(
            "q",
            "FieldValueInvalid",
            "Invalid value: \"\": 'no such overload': call arguments did not match a supported "
            "operator, function or macro signature for rule: self > 1",
        )
    ]


def test_ratcheting_keeps_unchanged_invalid_values(tf: StructuralSchema) -> None:
    old = tfjob(runPolicy={"backoffLimit": -3})  # stored before the minimum existed
    new = copy.deepcopy(old)
    new["spec"]["enableDynamicWorker"] = True
    assert tf.validate(new, old) == []
    new["spec"]["runPolicy"]["backoffLimit"] = -4
    assert tf.validate(new, old) == [
        cause(
            "spec.runPolicy.backoffLimit",
            "FieldValueInvalid",
            "Invalid value: -4: spec.runPolicy.backoffLimit in body should be greater than or equal to 0",
        )
    ]


def test_status_subresource_validation_is_relative_to_status(tf: StructuralSchema) -> None:
    obj = tfjob()
    obj["status"] = {"conditions": [{"type": "Running"}, {"type": 1, "status": "True"}]}
    obj["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = -1  # not checked on /status
    old = tfjob()
    assert tf.validate(obj, old, status_only=True) == [
        cause("status.conditions[0].status", "FieldValueRequired", "Required value"),
        cause(
            "status.conditions[1].type",
            "FieldValueTypeInvalid",
            'Invalid value: "integer": conditions[1].type in body must be of type string: "integer"',
        ),
        BLOCKED,
    ]


def test_list_types() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                },
            },
            "nums": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "number"}},
        },
    }
    s = StructuralSchema(schema)
    obj = {
        "tags": ["a", "b", "a", "a"],
        "ports": [{"name": "x", "port": 1}, {"name": "x", "port": 2}],
        "nums": [1, 1.5],
    }
    assert s.validate(obj) == [
        cause("tags[2]", "FieldValueDuplicate", 'Duplicate value: "a"'),
        cause("ports[1]", "FieldValueDuplicate", 'Duplicate value: {"name":"x"}'),
    ]


def test_list_types_deep_below_nodes_without_one() -> None:
    """The list checks skip subtrees whose schema declares no set or map list anywhere below, and only those."""
    s = StructuralSchema(
        {
            "type": "object",
            "properties": {
                "plain": {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "string"}}}},
                "m": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
                            },
                        },
                    },
                },
            },
        }
    )
    assert s.validate({"plain": {"l": ["a", "a"]}, "m": {"k": [{"tags": ["x", "y", "x"]}]}}) == [
        cause("m[k][0].tags[2]", "FieldValueDuplicate", 'Duplicate value: "x"')
    ]


# -- pruning and defaults --------------------------------------------------------------------------------


def test_prune_reports_and_removes_unknown_fields(tf: StructuralSchema) -> None:
    obj = tfjob()
    obj["metadata"]["bogus"] = 1
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u", "extra": 1}]
    obj["spec"]["unknown"] = {"deep": 1}
    worker = obj["spec"]["tfReplicaSpecs"]["Worker"]
    worker["template"]["metadata"] = {"labels": {"a": "b"}, "anything": True}  # preserve-unknown-fields
    worker["template"]["spec"]["containers"][0]["cmd"] = ["x"]
    obj["status"] = {"dynamicWorkers": {"free": {"form": 1}}, "phase": "x"}
    obj["top"] = 1
    removed = tf.prune(obj)
    assert removed == [
        "metadata.bogus",
        "metadata.ownerReferences[0].extra",
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].cmd",
        "spec.unknown",
        "status.phase",
        "top",
    ]
    assert "unknown" not in obj["spec"] and "top" not in obj and "phase" not in obj["status"]
    assert obj["apiVersion"] == "kubeflow.org/v1" and obj["kind"] == "TFJob"
    assert worker["template"]["metadata"] == {"labels": {"a": "b"}, "anything": True}
    assert obj["status"]["dynamicWorkers"] == {"free": {"form": 1}}
    assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u"}]


def test_prune_drops_non_nullable_nulls_and_keeps_nullable(tf: StructuralSchema) -> None:
    s = StructuralSchema(
        {
            "type": "object",
            "properties": {
                "a": {"type": "string"},
                "b": {"type": "string", "nullable": True},
                "c": {"type": "boolean", "default": True},
            },
        }
    )
    obj = {"a": None, "b": None, "c": None}
    assert s.prune(obj) == []
    assert obj == {"b": None, "c": None}
    s.apply_defaults(obj)
    assert obj == {"b": None, "c": True}


def test_prune_under_additional_properties_and_items() -> None:
    s = StructuralSchema(
        {
            "type": "object",
            "properties": {
                "m": {
                    "type": "object",
                    "additionalProperties": {"type": "object", "properties": {"keep": {"type": "integer"}}},
                },
                "l": {"type": "array", "items": {"type": "object", "properties": {"keep": {"type": "integer"}}}},
            },
        }
    )
    obj = {"m": {"k1": {"keep": 1, "drop": 2}}, "l": [{"keep": 1}, {"drop": 3}]}
    assert s.prune(obj) == ["l[1].drop", "m.k1.drop"]
    assert obj == {"m": {"k1": {"keep": 1}}, "l": [{"keep": 1}, {}]}


def test_defaults_apply_only_where_the_parent_exists(tf: StructuralSchema) -> None:
    obj = tfjob()
    tf.apply_defaults(obj)
    assert "runPolicy" not in obj["spec"]
    obj = tfjob(runPolicy={"cleanPodPolicy": "None"})
    tf.apply_defaults(obj)
    assert obj["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False}
    obj["spec"]["runPolicy"]["suspend"] = True
    tf.apply_defaults(obj)
    assert obj["spec"]["runPolicy"]["suspend"] is True


def test_defaults_are_copies_and_reach_items_and_maps() -> None:
    s = StructuralSchema(
        {
            "type": "object",
            "properties": {
                "l": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"tags": {"type": "array", "items": {"type": "string"}, "default": ["a"]}},
                    },
                },
                "m": {
                    "type": "object",
                    "additionalProperties": {"type": "object", "properties": {"n": {"type": "integer", "default": 7}}},
                },
            },
        }
    )
    obj = {"l": [{}, {"tags": []}], "m": {"x": {}, "y": {"n": 1}}}
    s.apply_defaults(obj)
    assert obj == {"l": [{"tags": ["a"]}, {"tags": []}], "m": {"x": {"n": 7}, "y": {"n": 1}}}
    obj["l"][0]["tags"].append("b")
    assert s.schema["properties"]["l"]["items"]["properties"]["tags"]["default"] == ["a"]


def test_defaults_deep_below_nodes_without_defaults_of_their_own() -> None:
    """Defaulting skips subtrees whose schema has no default anywhere below, and only those."""
    s = StructuralSchema(
        {
            "type": "object",
            "properties": {
                "plain": {"type": "object", "properties": {"x": {"type": "string"}}},
                "a": {
                    "type": "object",
                    "properties": {
                        "b": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": {
                                    "type": "object",
                                    "properties": {"z": {"type": "string", "default": "d"}},
                                },
                            },
                        }
                    },
                },
                "n": {"type": "array", "items": {"type": "string", "default": "i"}},
            },
        }
    )
    obj = {"plain": {"x": "1"}, "a": {"b": [{"k": {}}]}, "n": [None, "v"]}
    s.apply_defaults(obj)
    assert obj == {"plain": {"x": "1"}, "a": {"b": [{"k": {"z": "d"}}]}, "n": ["i", "v"]}


def test_field_exists(tf: StructuralSchema) -> None:
    assert tf.field_exists(["spec", "tfReplicaSpecs", "Worker", "replicas"])
    assert tf.field_exists(["status", "dynamicWorkers", "anything", "below"])
    assert not tf.field_exists(["spec", "nope"])
    assert not tf.field_exists(["spec", "tfReplicaSpecs", "Worker", "replicas", "deeper"])


# -- CRD validation --------------------------------------------------------------------------------------


def crd(schema: dict | None = None, **overrides: object) -> dict:
    version = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema if schema is not None else TFJOB_SCHEMA},
        "subresources": {"status": {}},
        "additionalPrinterColumns": [
            {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    }
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "tfjobs.kubeflow.org"},
        "spec": {
            "group": "kubeflow.org",
            "scope": "Namespaced",
            "names": {"plural": "tfjobs", "singular": "tfjob", "kind": "TFJob", "listKind": "TFJobList"},
            "versions": [version],
        },
    }
    for key, value in overrides.items():
        target, _, leaf = key.rpartition("__")
        node = body
        for part in target.split("__") if target else []:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[leaf] = value
    return body


def test_valid_crd() -> None:
    assert validate_crd(crd()) == []


S = "spec.validation.openAPIV3Schema"  # every version has the same schema: the server reports it top-level
FORBIDDEN = "Forbidden: must be empty to be structural"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            crd(metadata={"name": "tfjobs.example.com"}),
            [
                cause(
                    "metadata.name",
                    "FieldValueInvalid",
                    'Invalid value: "tfjobs.example.com": must be spec.names.plural+"."+spec.group',
                )
            ],
            id="name",
        ),
        pytest.param(
            crd(spec__group="kubeflow", metadata={"name": "tfjobs.kubeflow"}),
            [
                cause(
                    "spec.group",
                    "FieldValueInvalid",
                    'Invalid value: "kubeflow": should be a domain with at least one dot',
                )
            ],
            id="group-dot",
        ),
        pytest.param(
            crd(spec__scope="Global"),
            [
                cause(
                    "spec.scope",
                    "FieldValueNotSupported",
                    'Unsupported value: "Global": supported values: "Cluster", "Namespaced"',
                )
            ],
            id="scope",
        ),
        pytest.param(
            crd(spec__names__kind="TF_Job"),
            [
                cause(
                    "spec.names.kind",
                    "FieldValueInvalid",
                    'Invalid value: "TF_Job": may have mixed case, but should otherwise match: a DNS-1035 label must consist of '
                    "lower case alphanumeric characters or '-', start with an alphabetic character, and end with an "
                    "alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
                )
            ],
            id="kind",
        ),
        pytest.param(
            crd(spec__names__listKind="TFJob"),
            [
                cause(
                    "spec.names.listKind",
                    "FieldValueInvalid",
                    'Invalid value: "TFJob": kind and listKind may not be the same',
                )
            ],
            id="listKind",
        ),
        pytest.param(
            crd(spec__names={"plural": "tfjobs", "kind": "TFJob", "listKind": "TFJobList"}),
            [cause("spec.names.singular", "FieldValueRequired", "Required value")],
            id="singular-required",
        ),
        pytest.param(
            crd(spec__versions__0__schema=None),
            [cause("spec.versions[0].schema.openAPIV3Schema", "FieldValueRequired", "Required value")],
            id="schema-required",
        ),
        pytest.param(
            crd(
                {
                    "type": "object",
                    "properties": {"spec": {"type": "object", "properties": {"x": {}, "l": {"type": "array"}}}},
                }
            ),
            [
                cause(
                    f"{S}.properties[spec].properties[l].items",
                    "FieldValueRequired",
                    "Required value: must be specified",
                ),
                cause(
                    f"{S}.properties[spec].properties[x].type",
                    "FieldValueRequired",
                    "Required value: must not be empty for specified object fields",
                ),
            ],
            id="structural",
        ),
        pytest.param(
            crd(
                {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {"x": {"type": "integer", "default": "a"}}}
                    },
                }
            ),
            [
                cause(
                    f"{S}.properties[spec].properties[x].default",
                    "FieldValueTypeInvalid",
                    'Invalid value: "string":  in body must be of type integer: "string"',
                )
            ],
            id="bad-default",
        ),
        pytest.param(
            crd(
                {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "properties": {"x": {"type": "integer"}},
                            "x-kubernetes-validations": [{"rule": "self.y == 0"}],
                        }
                    },
                }
            ),
            [
                cause(
                    f"{S}.properties[spec].x-kubernetes-validations[0].rule",
                    "FieldValueInvalid",
                    'Invalid value: {"Rule":"self.y == 0","Message":"","MessageExpression":"","Reason":null,"FieldPath":"",'
                    "\"OptionalOldSelf\":null}: compilation failed: ERROR: <input>:1:5: undefined field 'y'\n | self.y == 0\n | ....^",
                )
            ],
            id="cel-undefined-field",
        ),
        pytest.param(
            crd(
                {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "properties": {"x": {"type": "integer"}},
                            "x-kubernetes-validations": [{"rule": "self.x >"}],
                        }
                    },
                }
            ),
            [
                cause(
                    f"{S}.properties[spec].x-kubernetes-validations[0].rule",
                    "FieldValueInvalid",
                    'Invalid value: {"Rule":"self.x \\u003e","Message":"","MessageExpression":"","Reason":null,"FieldPath":"",'
                    "\"OptionalOldSelf\":null}: compilation failed: ERROR: <input>:1:9: Syntax error: mismatched input '<EOF>'\n | self.x >\n | ........^",
                )
            ],
            id="cel-syntax",
        ),
        pytest.param(
            crd(
                {
                    "type": "object",
                    "properties": {
                        "l": {
                            "type": "array",
                            "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]},
                        }
                    },
                }
            ),
            [
                cause(
                    f"{S}.properties[l].items.x-kubernetes-validations[0].rule",
                    "FieldValueInvalid",
                    f'Invalid value: "self == oldSelf": oldSelf cannot be used on the uncorrelatable portion of the schema within {S}.properties[l]',
                )
            ],
            id="cel-oldself-uncorrelatable",
        ),
        pytest.param(
            crd(
                {
                    "type": "object",
                    "properties": {
                        "s": {
                            "type": "string",
                            "x-kubernetes-validations": [
                                {"rule": "self.size() > 0", "reason": "Bad", "optionalOldSelf": True}
                            ],
                        }
                    },
                }
            ),
            [
                cause(
                    f"{S}.properties[s].x-kubernetes-validations[0].reason",
                    "FieldValueNotSupported",
                    'Unsupported value: "Bad": supported values: "FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"',
                )
            ],
            id="cel-reason",
        ),
        pytest.param(
            crd(
                {
                    "type": "object",
                    "properties": {
                        "s": {
                            "type": "string",
                            "x-kubernetes-validations": [{"rule": "self.size() > 0", "optionalOldSelf": True}],
                        }
                    },
                }
            ),
            [
                cause(
                    f"{S}.properties[s].x-kubernetes-validations[0].optionalOldSelf",
                    "FieldValueInvalid",
                    "Invalid value: true: may not be set if oldSelf is not used in rule",
                )
            ],
            id="optionalOldSelf-unused",
        ),
        pytest.param(
            crd(
                {
                    "type": "object",
                    "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}},
                }
            ),
            [
                cause(
                    f"{S}.properties[metadata]",
                    "FieldValueForbidden",
                    "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
                )
            ],
            id="metadata-restricted",
        ),
        pytest.param(
            crd({"type": "object", "properties": {"spec": {"type": "object", "properties": {"x": {"type": "nil"}}}}}),
            [
                cause(
                    f"{S}.properties[spec].properties[x].type",
                    "FieldValueNotSupported",
                    'Unsupported value: "nil": supported values: "array", "boolean", "integer", "number", "object", "string"',
                )
            ],
            id="bad-type",
        ),
        pytest.param(
            crd({"type": "object", "additionalProperties": {"type": "string"}}, spec__versions__0__subresources=None),
            [cause(f"{S}.additionalProperties", "FieldValueForbidden", "Forbidden: must not be used at the root")],
            id="root-additionalProperties",
        ),
        pytest.param(crd(spec__versions__0__storage=False), None, id="no-storage-version"),
        pytest.param(
            crd(
                spec__versions__0__subresources={
                    "status": {},
                    "scale": {"specReplicasPath": "spec.replicas", "statusReplicasPath": ".spec.replicas"},
                }
            ),
            [
                cause(
                    "spec.subresources.scale.specReplicasPath",
                    "FieldValueInvalid",
                    'Invalid value: "spec.replicas": must be a simple json path starting with .',
                ),
                cause(
                    "spec.subresources.scale.statusReplicasPath",
                    "FieldValueInvalid",
                    'Invalid value: ".spec.replicas": should be a json path under .status',
                ),
            ],
            id="scale-paths",
        ),
        pytest.param(
            crd(
                spec__versions__0__additionalPrinterColumns=[
                    {"name": "X", "type": "text", "jsonPath": "status.x"},
                    {"name": "", "type": "string", "format": "weird"},
                ]
            ),
            [
                cause(
                    "spec.additionalPrinterColumns[0].type",
                    "FieldValueInvalid",
                    'Invalid value: "text": must be one of boolean,date,integer,number,string',
                ),
                cause(
                    "spec.additionalPrinterColumns[0].JSONPath",
                    "FieldValueInvalid",
                    'Invalid value: "status.x": must be a simple json path starting with .',
                ),
                cause("spec.additionalPrinterColumns[1].name", "FieldValueRequired", "Required value"),
                cause(
                    "spec.additionalPrinterColumns[1].format",
                    "FieldValueInvalid",
                    'Invalid value: "weird": must be one of byte,date,date-time,double,float,int32,int64,password',
                ),
                cause("spec.additionalPrinterColumns[1].JSONPath", "FieldValueRequired", "Required value"),
            ],
            id="printer-columns",
        ),
        pytest.param(
            crd(
                {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "properties": {
                                "template": {
                                    "type": "object",
                                    "x-kubernetes-embedded-resource": True,
                                    "properties": {
                                        "metadata": {
                                            "type": "object",
                                            "additionalProperties": {"type": "string", "default": "x"},
                                        }
                                    },
                                }
                            },
                        }
                    },
                }
            ),
            [
                cause(
                    f"{S}.properties[spec].properties[template].properties[metadata].additionalProperties.default",
                    "FieldValueForbidden",
                    "Forbidden: must not be set inside additionalProperties applying to object metadata",
                )
            ],
            id="default-in-embedded-metadata-map",
        ),
        pytest.param(  # rules under a junctor are not structural, and not compiled (no CEL syntax error)
            crd(
                {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "properties": {"x": {"type": "integer"}},
                            "allOf": [{"x-kubernetes-validations": [{"rule": "self.x >"}]}],
                            "not": {"x-kubernetes-validations": [{"rule": "self.x >"}]},
                        }
                    },
                }
            ),
            [
                cause(f"{S}.properties[spec].allOf[0].x-kubernetes-validations", "FieldValueForbidden", FORBIDDEN),
                cause(f"{S}.properties[spec].not.x-kubernetes-validations", "FieldValueForbidden", FORBIDDEN),
            ],
            id="cel-under-junctors",
        ),
    ],
)
def test_crd_validation(body: dict, expected: list[dict] | None) -> None:
    causes = validate_crd(body)
    if expected is None:  # the message embeds the versions list; check the stable parts
        assert [(c["field"], c["reason"]) for c in causes] == [("spec.versions", "FieldValueInvalid")]
        assert causes[0]["message"].endswith(": must have exactly one version marked as storage version")
        return
    assert causes == expected


def test_root_schema_must_be_object_and_status_root_fields() -> None:
    causes = validate_crd(crd({"type": "string"}))
    assert cause(f"{S}.type", "FieldValueInvalid", 'Invalid value: "string": must be object at the root') in causes
    assert (
        cause(
            "spec.validation.openAPIV3Schema.type",
            "FieldValueInvalid",
            'Invalid value: "string": only "object" is allowed as the type at the root of the schema if the status subresource is enabled',
        )
        in causes
    )


def test_per_version_schemas_are_reported_per_version() -> None:
    body = crd()
    v2 = copy.deepcopy(body["spec"]["versions"][0])
    v2.update(name="v2", storage=False, schema={"openAPIV3Schema": {"type": "object", "properties": {"x": {}}}})
    body["spec"]["versions"].append(v2)
    assert validate_crd(body) == [
        cause(
            "spec.versions[1].schema.openAPIV3Schema.properties[x].type",
            "FieldValueRequired",
            "Required value: must not be empty for specified object fields",
        )
    ]


def test_invalid_builds_the_apiserver_status() -> None:
    causes = validate_crd(crd(spec__scope="Global"))
    err = invalid("CustomResourceDefinition", "tfjobs.kubeflow.org", causes, "apiextensions.k8s.io")
    assert err.code == 422
    assert err.message == (
        'CustomResourceDefinition.apiextensions.k8s.io "tfjobs.kubeflow.org" is invalid: '
        'spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced"'
    )


# -- Go formatting helpers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ('a"b', '"a\\"b"'),
        ("tab\t", '"tab\\t"'),
        ("é", '"é"'),
        ("\x01", '"\\x01"'),
    ],
)
def test_go_quote(value: str, text: str) -> None:
    assert go_quote(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"b": 1, "a": [1.0, 2.5, None, True]}, '{"a":[1,2.5,null,true],"b":1}'),
        ("<&>", '"\\u003c\\u0026\\u003e"'),
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
    ],
)
def test_go_json(value: object, text: str) -> None:
    assert go_json(value) == text


def test_optional_old_self_rules_also_run_on_create() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {
                "type": "integer",
                "x-kubernetes-validations": [
                    {
                        "rule": "oldSelf.hasValue() ? self >= oldSelf.value() : self < 10",
                        "optionalOldSelf": True,
                        "message": "must start below 10 and never decrease",
                    }
                ],
            }
        },
    }
    s = StructuralSchema(schema)
    assert s.validate({"n": 5}) == []
    assert s.validate({"n": 50}) == [
        cause("n", "FieldValueInvalid", 'Invalid value: "integer": must start below 10 and never decrease')
    ]
    assert s.validate({"n": 50}, {"n": 5}) == []
    assert s.validate({"n": 4}, {"n": 5}) == [
        cause("n", "FieldValueInvalid", 'Invalid value: "integer": must start below 10 and never decrease')
    ]


def test_map_list_items_correlate_by_key_for_transition_rules() -> None:
    schema = {
        "type": "object",
        "properties": {
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string"},
                        "port": {
                            "type": "integer",
                            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "immutable"}],
                        },
                    },
                },
            }
        },
    }
    s = StructuralSchema(schema)
    old = {"ports": [{"name": "a", "port": 1}, {"name": "b", "port": 2}]}
    reordered_and_added = {"ports": [{"name": "c", "port": 9}, {"name": "b", "port": 2}, {"name": "a", "port": 1}]}
    assert s.validate(reordered_and_added, old) == []
    changed = {"ports": [{"name": "b", "port": 3}, {"name": "a", "port": 1}]}
    assert s.validate(changed, old) == [
        cause("ports[0].port", "FieldValueInvalid", 'Invalid value: "integer": immutable')
    ]


def test_rules_that_fail_to_compile_at_runtime_are_reported_not_raised() -> None:
    # validate_crd rejects such schemas; a stored one must still give a clean error, never a crash.
    s = StructuralSchema(
        {"type": "object", "properties": {"x": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >"}]}}}
    )
    [only] = s.validate({"x": 1})
    assert only["field"] == "x" and only["message"].startswith(
        'Invalid value: "integer": rule compile error: compilation failed: ERROR: <input>:1:7: Syntax error'
    )
