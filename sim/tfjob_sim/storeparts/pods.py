"""The pods' write subresources: eviction and binding.

Why this is its own part: both are POSTs of another kind (Eviction, Binding) that the pod registry
turns into writes of the pod: an eviction marks the pod (DisruptionTarget) and deletes it gracefully,
a binding sets the node and PodScheduled in one write, as the scheduler's assignPod.

Contract: both answer a success Status; binding an assigned or terminating pod is a 409.
"""

from __future__ import annotations

from tfjob_sim import errors
from tfjob_sim.resources import required_value, set_condition
from tfjob_sim.storeparts.deletion import Deletion
from tfjob_sim.storeparts.updates import Updates
from tfjob_sim.storeparts.values import WriteOptions, rfc3339


class PodSubresources(Updates, Deletion):
    """evict and bind."""

    def evict(self, namespace: str, name: str, eviction: dict) -> dict:
        """POST pods/{name}/eviction (policy/v1): graceful delete, no PDBs modelled. Returns a Status."""
        rt = self.resource_type("pods")
        if not isinstance(eviction, dict):
            raise errors.bad_request("the object provided is unrecognized (must be of type Eviction)")
        if eviction.get("kind") not in (None, "Eviction"):
            raise errors.bad_request(
                f"the kind in the data ({eviction.get('kind')}) does not match the expected kind (Eviction)"
            )
        body_name = (eviction.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        pod = self.get_or_404("pods", namespace, name)
        options = eviction.get("deleteOptions") or {}
        status = pod.get("status") or {}
        if not pod["metadata"].get("deletionTimestamp") and status.get("phase") not in ("Succeeded", "Failed"):
            # Like the eviction REST handler since PodDisruptionConditions (GA in 1.31): say why the pod is
            # going before deleting it, so controllers can tell an eviction from a plain delete.
            conditions = set_condition(
                status.get("conditions") or [],
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting",
                },
                rfc3339(self.clock()),
            )
            self.update_ex(
                rt.qualified,
                namespace,
                name,
                {**pod, "status": {**status, "conditions": conditions}},
                "status",
                WriteOptions(track_ownership=False),
            )
        self.delete_ex(rt.qualified, namespace, name, options)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def bind(self, namespace: str, name: str, binding: dict) -> dict:
        """POST pods/{name}/binding, in one write like the real registry's assignPod.

        Sets spec.nodeName (once), merges the Binding's annotations into the pod's and sets the
        PodScheduled condition to True (lastTransitionTime kept if it already was True). Returns a
        Status.
        """
        if not isinstance(binding, dict) or not isinstance(binding.get("target"), dict):
            raise errors.invalid("Binding", name, [required_value("target")])
        node = binding["target"].get("name")
        if not node:
            raise errors.invalid("Binding", name, [required_value("target.name")])
        rt = self.resource_type("pods")
        pod = self.get_or_404("pods", namespace, name)
        if (pod.get("spec") or {}).get("nodeName"):
            raise errors.conflict(
                "pods/binding", name, "", f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"'
            )
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            raise errors.conflict(
                "pods/binding", name, "", f"pod {name} is being deleted, cannot be assigned to a host"
            )
        new = dict(pod)
        new["spec"] = dict(pod.get("spec") or {}, nodeName=node)
        status = dict(pod.get("status") or {})
        status["conditions"] = set_condition(
            status.get("conditions") or [], {"type": "PodScheduled", "status": "True"}, rfc3339(self.clock())
        )
        new["status"] = status
        meta = dict(pod["metadata"])
        annotations = (binding.get("metadata") or {}).get("annotations")
        if isinstance(annotations, dict) and annotations:
            meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        new["metadata"] = meta
        self._validate(rt, new, pod)
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        self._commit(self._bucket(rt), "MODIFIED", (namespace, name), pod, new, rv)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
