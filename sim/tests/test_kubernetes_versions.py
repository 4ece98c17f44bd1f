"""The simulator behaving as a given Kubernetes minor (tfjob_sim.versions): /version says so, and the TFJob CRD is
accepted from the oldest minor docs/operations.md supports (1.30) to the newest modelled, and refused one minor
below with kube-apiserver's message (1.29 drops a rule's optionalOldSelf, so oldSelf.hasValue() does not compile)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tfjob_sim.discovery import server_version
from tfjob_sim.errors import ApiError
from tfjob_sim.store import Store, StoreConfig
from tfjob_sim.testing.fixtures import FakeClock
from tfjob_sim.versions import NEWEST_MINOR, OPTIONAL_OLD_SELF_MINOR, parse_kubernetes_version

CRD = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "manifests" / "crd" / "kubeflow.org_tfjobs.yaml").read_text()
)
CRDS = "customresourcedefinitions.apiextensions.k8s.io"
# The oldest minor the project supports (docs/operations.md): the newest CRD feature it uses is optionalOldSelf.
SUPPORTED_FROM = 30


def install(minor: int) -> dict:
    return Store(StoreConfig(kubernetes_minor=minor), clock=FakeClock()).create(CRDS, None, CRD)


@pytest.mark.parametrize("minor", [SUPPORTED_FROM, 33, NEWEST_MINOR])
def test_the_tfjob_crd_installs_from_the_oldest_supported_minor_to_the_newest(minor: int) -> None:
    assert install(minor)["metadata"]["name"] == "tfjobs.kubeflow.org"


def test_one_minor_below_the_oldest_refuses_the_crd_with_kube_apiservers_message() -> None:
    assert SUPPORTED_FROM == OPTIONAL_OLD_SELF_MINOR
    with pytest.raises(ApiError) as refused:
        install(SUPPORTED_FROM - 1)
    assert refused.value.code == 422
    message = refused.value.message
    assert message.startswith('CustomResourceDefinition.apiextensions.k8s.io "tfjobs.kubeflow.org" is invalid: ')
    assert "spec.validation.openAPIV3Schema.x-kubernetes-validations[1].rule: Invalid value: " in message
    assert re.search(
        r"compilation failed: ERROR: <input>:1:\d+: found no matching overload for 'hasValue' applied to "
        r"'selfType\d+\.\(\)'",
        message,
    ), message


def test_version_says_the_minor() -> None:
    assert server_version(30)["gitVersion"] == "v1.30.0" and server_version(30)["minor"] == "30"


@pytest.mark.parametrize(("text", "minor"), [("1.30", 30), ("v1.35", 35), ("1.29.4", 29)])
def test_versions_the_flag_reads(text: str, minor: int) -> None:
    assert parse_kubernetes_version(text) == minor


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("1.28", "the simulator behaves as Kubernetes 1.29 to 1.35, not 1.28"),
        ("2.1", "expected a Kubernetes version like 1.33, got '2.1'"),
        ("latest", "expected a Kubernetes version like 1.33, got 'latest'"),
    ],
)
def test_versions_the_flag_refuses_in_one_line(text: str, error: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_kubernetes_version(text)
    assert str(refused.value) == error
