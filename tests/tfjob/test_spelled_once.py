"""The TFJob API's field names are spelled once, in controller/tfjob/api.py (and the CRD's schema).

A field name written inline drifts from its constant unnoticed (a typo reads as "absent", never as an
error), so every other module of controller/tfjob must name the TFJob's spec and status fields through
api.py. Names the TFJob shares with the Kubernetes core objects the modules also read (a pod's
``status.conditions``, a container state's ``exitCode``) are left out: the same word is a different field.
"""

from __future__ import annotations

import ast
from pathlib import Path

from controller.tfjob import api

TFJOB = Path(api.__file__).parent
SCHEMA = {TFJOB / "api.py", TFJOB / "crd.py"}
FIELD_PREFIXES = ("SPEC_", "REPLICA_", "RUN_", "SCHEDULING_", "STATUS_", "CONDITION_", "WORKER_")
# Field names that are also fields of pods, containers, templates or PodGroups (gang.py spells the PodGroup ones),
# read under those names.
SHARED_WITH_CORE = {
    "conditions",
    "startTime",
    "status",
    "type",
    "reason",
    "message",
    "state",
    "exitCode",
    "restartPolicy",
    "template",
    "replicas",
    "selector",
    "active",
    "succeeded",
    "failed",
    "queue",
    "minResources",
    "scheduleTimeoutSeconds",
    "lastTransitionTime",
    "lastUpdateTime",
    "summary",
    "members",
    "workers",
}


def tfjob_field_names() -> dict[str, str]:
    """TFJob-only field names by value -> the api.py constant that spells them."""
    names = {}
    for const, value in vars(api).items():
        if const.startswith(FIELD_PREFIXES) and isinstance(value, str) and value.isidentifier():
            if value not in SHARED_WITH_CORE:
                names[value] = const
    return names


def test_the_field_list_is_not_empty() -> None:
    names = tfjob_field_names()
    for expected in ("tfReplicaSpecs", "runPolicy", "enableDynamicWorker", "ttlSecondsAfterFinished", "podUID"):
        assert expected in names


def test_no_tfjob_field_name_is_written_inline_outside_api() -> None:
    names = tfjob_field_names()
    inline = []
    for path in sorted(TFJOB.rglob("*.py")):
        if path in SCHEMA:
            continue
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if node.value in names:
                    where = f"{path.relative_to(TFJOB.parent.parent)}:{node.lineno}"
                    inline.append(f"{where}: {node.value!r} (use api.{names[node.value]})")
    assert not inline, "field names written inline:\n" + "\n".join(inline)
