"""Reading who wrote an object from its managedFields (controller/runtime/managedfields.py)."""

from __future__ import annotations

from controller.runtime.managedfields import Writer, manager_from_user_agent, owner_reference_setter, writers

POD = {
    "metadata": {
        "name": "j-worker-0",
        "managedFields": [
            {
                "manager": "manager",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2024-05-01T12:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:ownerReferences": {".": {}, 'k:{"uid":"job-uid"}': {}}}},
            },
            {
                "manager": "kubelet",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2024-05-01T12:00:05Z",
                "subresource": "status",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:phase": {}}},
            },
            "not an entry",
        ],
    }
}


def test_the_manager_is_the_user_agent_up_to_its_first_slash() -> None:
    assert manager_from_user_agent("manager/v0.0.0 (linux/amd64) kubernetes/$Format") == "manager"
    assert manager_from_user_agent("tfjob-controller/0.1.0 (pod-a)") == "tfjob-controller"
    assert manager_from_user_agent("curl") == "curl"


def test_writers_by_subresource() -> None:
    assert writers(POD) == (
        Writer("manager", "Update", "", "2024-05-01T12:00:00Z"),
        Writer("kubelet", "Update", "status", "2024-05-01T12:00:05Z"),
    )
    assert writers(POD, subresource="status") == (Writer("kubelet", "Update", "status", "2024-05-01T12:00:05Z"),)
    assert writers({"metadata": {}}) == () and writers(None) == ()


def test_the_owner_reference_setter_is_the_creator_of_a_controlled_pod() -> None:
    assert owner_reference_setter(POD, "job-uid") == "manager"
    assert owner_reference_setter(POD, "another-uid") is None
    assert owner_reference_setter({"metadata": {}}, "job-uid") is None
