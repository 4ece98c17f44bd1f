"""The simulated nodes' lifecycle: their registration, their readiness and taints, and what the node
lifecycle controller and its taint manager do to the pods of a node that stopped reporting.

Why a module of its own: whether a node is reachable is a fault the tests inject
(:meth:`NodeLifecycle.set_node_ready`), and what follows for its pods (marked not ready at once, deleted
after their NoExecute toleration) is kube-controller-manager's, not the pods' own kubelet's, which can
do nothing while its node is unreachable.

Contract:
- :meth:`NodeLifecycle.register_nodes` creates the configured Ready nodes ("sim-node-0", ...) as their
  kubelets would register them; existing nodes are kept.
- :meth:`NodeLifecycle.set_node_ready` writes what the node lifecycle controller records: NotReady is
  every node condition Unknown plus the unreachable NoSchedule and NoExecute taints; Ready is the
  kubelet posting Ready again, the taints removed. A NodeReady/NodeNotReady event per change.
- :meth:`NodeLifecycle.unreachable` handles one pod bound to a NotReady node for the worker: Ready=False
  (with a NodeNotReady event) once, then, after the pod's NoExecute toleration (default
  ``node_eviction_seconds``), a DisruptionTarget condition and a graceful DELETE. Only a kubelet can
  confirm that deletion, so the pod stays Terminating until its node is back.
"""

from __future__ import annotations

from typing import Any

import anyio

from tfjob_sim.errors import not_found
from tfjob_sim.events import node_reference, object_reference
from tfjob_sim.nodestate import NodeState
from tfjob_sim.podstate import _Node, _PodRecord, _sha256, now_timestamp
from tfjob_sim.resources import set_condition
from tfjob_sim.scheduler import TAINT_NOT_READY, TAINT_UNREACHABLE, tolerates

NODE_NOT_POSTING = "Kubelet stopped posting node status."
NODE_CONTROLLER = "node-controller"
SIM_KUBELET_VERSION = "v1.31.0"

# (type, healthy reason, healthy message) of the conditions a kubelet posts for its node.
NODE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "KubeletReady", "kubelet is posting ready status"),
)


def _uuid_from(text: str) -> str:
    h = _sha256(text)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


class NodeLifecycle:
    """Node registration, readiness faults, and the node lifecycle controller's handling of the pods of
    unreachable nodes, over :class:`~tfjob_sim.nodestate.NodeState`."""

    def __init__(self, state: NodeState) -> None:
        self._state = state

    # ---------------------------------------------------------------- nodes

    def register_nodes(self) -> None:
        """Create the configured nodes that do not exist yet, Ready, with their status posted."""
        store = self._state.store
        cfg = self._state.config
        for i in range(cfg.nodes):
            name = f"{cfg.node_name_prefix}{i}"
            if store.get("nodes", None, name) is not None:
                continue
            node = self.node_object(name, i)
            created = store.create("nodes", None, node, field_manager="kubelet")
            if not (created.get("status") or {}).get("conditions"):
                # The store dropped status on create: post it like a kubelet registering itself.
                store.patch(
                    "nodes",
                    None,
                    name,
                    "merge",
                    {"status": node["status"]},
                    subresource="status",
                    field_manager="kubelet",
                )

    def node_object(self, name: str, index: int) -> dict:
        """The Node a simulated kubelet registers as the ``index``-th node: the configured capacity,
        Ready, an InternalIP of its own, and stable identifiers derived from the name."""
        cfg = self._state.config
        now = now_timestamp()
        capacity = {
            "cpu": str(cfg.node_cpu),
            "ephemeral-storage": "100Gi",
            "memory": str(cfg.node_memory),
            "pods": str(cfg.node_pods),
        }
        host = index + 2
        address = f"172.18.{host // 256}.{host % 256}"
        conditions = []
        for ctype, reason, message in NODE_CONDITIONS:
            conditions.append(
                {
                    "type": ctype,
                    "status": "True" if ctype == "Ready" else "False",
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            )
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "beta.kubernetes.io/arch": "amd64",
                    "beta.kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "type": "sim",
                },
                "annotations": {"node.alpha.kubernetes.io/ttl": "0", "sim.tfjob.dev/managed": "true"},
            },
            "spec": {},
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "conditions": conditions,
                "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": _uuid_from(name + "/boot"),
                    "containerRuntimeVersion": "containerd://1.7.22",
                    "kernelVersion": "6.1.0-sim",
                    "kubeProxyVersion": SIM_KUBELET_VERSION,
                    "kubeletVersion": SIM_KUBELET_VERSION,
                    "machineID": _sha256(name)[:32],
                    "operatingSystem": "linux",
                    "osImage": "tfjob-controller simulated node",
                    "systemUUID": _uuid_from(name + "/system"),
                },
            },
        }

    def set_node_ready(self, name: str, ready: bool) -> None:
        """Fault API: make a node unreachable (as the node lifecycle controller records it) or Ready.

        NotReady: all node conditions Unknown/NodeStatusUnknown and the unreachable NoSchedule and
        NoExecute taints. Ready: the kubelet posts Ready again and the taints go. Raises a 404
        ApiError for an unknown node.
        """
        store = self._state.store
        node = store.get("nodes", None, name)
        if node is None:
            raise not_found("nodes", name)
        now = now_timestamp()
        status = node.get("status") or {}
        old_conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
        conditions = []
        for ctype, healthy_reason, healthy_message in NODE_CONDITIONS:
            old = old_conditions.get(ctype, {})
            if ready:
                value = "True" if ctype == "Ready" else "False"
                cond = {
                    "type": ctype,
                    "status": value,
                    "reason": healthy_reason,
                    "message": healthy_message,
                    "lastHeartbeatTime": now,
                }
            else:
                value = "Unknown"
                cond = {
                    "type": ctype,
                    "status": value,
                    "reason": "NodeStatusUnknown",
                    "message": NODE_NOT_POSTING,
                    "lastHeartbeatTime": old.get("lastHeartbeatTime", now),
                }
            cond["lastTransitionTime"] = (
                old["lastTransitionTime"] if old.get("status") == value and old.get("lastTransitionTime") else now
            )
            conditions.append(cond)
        known = {c[0] for c in NODE_CONDITIONS}
        conditions += [c for t, c in old_conditions.items() if t not in known]
        was_ready = (old_conditions.get("Ready") or {}).get("status") == "True"
        if was_ready != ready:
            status_text = "NodeReady" if ready else "NodeNotReady"
            self._state.events.record(
                node_reference(name),
                "Normal",
                status_text,
                f"Node {name} status is now: {status_text}",
                component=NODE_CONTROLLER,
            )
        store.patch(
            "nodes",
            None,
            name,
            "merge",
            {"status": {"conditions": conditions}},
            subresource="status",
            field_manager="kubelet",
        )

        taints = [
            t
            for t in ((node.get("spec") or {}).get("taints") or [])
            if not (isinstance(t, dict) and t.get("key") == TAINT_UNREACHABLE)
        ]
        if not ready:
            taints += [
                {"key": TAINT_UNREACHABLE, "effect": "NoSchedule"},
                {"key": TAINT_UNREACHABLE, "effect": "NoExecute", "timeAdded": now},
            ]
        store.patch(
            "nodes", None, name, "merge", {"spec": {"taints": taints or None}}, field_manager="kube-controller-manager"
        )

    # ---------------------------------------------------------------- pods of unreachable nodes

    def unreachable(self, pod: dict, rec: _PodRecord, node: _Node) -> float | None:
        """What the node lifecycle controller and the taint manager do to a pod of the unreachable
        ``node``; returns when to look at the pod again (its eviction is due), or None."""
        state = self._state
        status = pod.get("status") or {}
        meta = pod.get("metadata") or {}
        if not rec.unreachable_marked:
            rec.unreachable_marked = True
            conditions = status.get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                ts = now_timestamp()
                marked = [
                    dict(c, status="False", lastTransitionTime=ts) if c.get("type") == "Ready" else c
                    for c in conditions
                ]
                pod = state.write_status(pod, {"conditions": marked})
                status = pod.get("status") or {}
                state.events.record(
                    object_reference(pod), "Warning", "NodeNotReady", "Node is not ready", component=NODE_CONTROLLER
                )
        if meta.get("deletionTimestamp") or rec.taint_evicted:
            return None  # terminating: only a kubelet can confirm it
        taint = next(
            (
                t
                for t in node.taints
                if t.get("effect") == "NoExecute" and t.get("key") in (TAINT_UNREACHABLE, TAINT_NOT_READY)
            ),
            None,
        )
        if taint is None:
            return None
        toleration = tolerates((pod.get("spec") or {}).get("tolerations") or [], taint)
        if toleration is None:
            # DefaultTolerationSeconds admission gives every pod this toleration; our store does not.
            seconds = float(state.config.node_eviction_seconds)
        else:
            given = toleration.get("tolerationSeconds")
            if given is None:
                return None  # tolerates the taint forever
            seconds = max(0.0, float(given))
        now = anyio.current_time()
        due = (node.not_ready_since or now) + seconds * state.scale
        if now < due:
            return due
        cond: dict[str, Any] = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint",
        }
        state.write_status(pod, {"conditions": set_condition(status.get("conditions") or [], cond, now_timestamp())})
        rec.taint_evicted = True
        state.store.delete("pods", meta.get("namespace"), meta["name"], {"preconditions": {"uid": rec.uid}})
        return None

    def reachable(self, rec: _PodRecord) -> None:
        """The pod's node is Ready: should it become unreachable again, its pods are marked again."""
        rec.unreachable_marked = False
