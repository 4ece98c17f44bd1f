"""RBAC for the simulated cluster: kube-apiserver's RBAC authorizer, the bootstrap roles, and the
clusterrole-aggregation controller.

Why this module exists: in secure mode (``tfjob-controller sim --secure``) every request is
authorized like on a kubeadm cluster, so a permission the controller's ClusterRole lacks shows up
as the same 403 it would get in a user's cluster, and ``kubectl auth can-i`` answers the same.

Contract (kube-apiserver's RBAC authorizer and its access reviews):
- :class:`Attributes` are a request's authorization attributes (user, verb, API group, resource,
  subresource, name, namespace, or a non-resource path).
- :meth:`RBACAuthorizer.authorize` returns ``(allowed, reason)``. ``system:masters`` is allowed
  first (the superuser authorizer); then every ClusterRoleBinding, then the RoleBindings of the
  request's namespace, first allowing rule wins; there is no deny. Rule matching: verbs, apiGroups,
  resources (``*``, ``resource/subresource``, ``*/subresource``), resourceNames (never matched by a
  request without a name), nonResourceURLs (exact, ``*``, prefix ending in ``*``). The reason of
  a denial lists the missing roles (``clusterrole.rbac.authorization.k8s.io "x" not found``).
- :func:`forbidden` builds the exact 403 Status.
- :meth:`RBACAuthorizer.rules_for` gives what SelfSubjectRulesReview returns.
- :func:`bootstrap_objects` are the default ClusterRoles/ClusterRoleBindings users rely on
  (cluster-admin, admin/edit/view aggregating from system:aggregate-to-*, system:discovery,
  system:basic-user, system:public-info-viewer).
- :class:`ClusterRoleAggregator` fills ``rules`` of every ClusterRole with an ``aggregationRule``
  from the ClusterRoles its selectors match (sorted by name, duplicates skipped) and keeps them
  so (manual edits are reverted), re-running on every ClusterRole change; it runs as a store
  listener plus one worker task like the other simulated controllers.
- Bindings are read from the store at each decision through a per-change cache: RBAC objects are
  indexed once per change of any of them, so a request costs a few dict lookups.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog

from tfjob_sim.errors import ApiError
from tfjob_sim.selectors import label_selector_from_dict

log = structlog.get_logger(__name__)

CLUSTER_ROLES = "clusterroles.rbac.authorization.k8s.io"
CLUSTER_ROLE_BINDINGS = "clusterrolebindings.rbac.authorization.k8s.io"
ROLES = "roles.rbac.authorization.k8s.io"
ROLE_BINDINGS = "rolebindings.rbac.authorization.k8s.io"
RBAC_RESOURCES = frozenset({CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, ROLES, ROLE_BINDINGS})
SUPERUSER_GROUP = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = self.extra
        return out


@dataclass(frozen=True)
class Attributes:
    """A request's authorization attributes (k8s.io/apiserver authorizer.Attributes)."""

    user: UserInfo
    verb: str
    resource_request: bool
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    namespace: str = ""
    path: str = ""


# ------------------------------------------------------------------------------------ rule matching


def _verb_matches(rule: dict, verb: str) -> bool:
    verbs = rule.get("verbs") or ()
    return "*" in verbs or verb in verbs


def _resource_matches(rule: dict, resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    for candidate in rule.get("resources") or ():
        if candidate == "*" or candidate == combined:
            return True
        if subresource and candidate == f"*/{subresource}":
            return True
    return False


def _non_resource_matches(rule: dict, path: str) -> bool:
    for url in rule.get("nonResourceURLs") or ():
        if url == "*" or url == path or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def rule_allows(attrs: Attributes, rule: dict) -> bool:
    if not isinstance(rule, dict) or not _verb_matches(rule, attrs.verb):
        return False
    if not attrs.resource_request:
        return _non_resource_matches(rule, attrs.path)
    groups = rule.get("apiGroups") or ()
    if "*" not in groups and attrs.api_group not in groups:
        return False
    if not _resource_matches(rule, attrs.resource, attrs.subresource):
        return False
    names = rule.get("resourceNames") or ()
    return not names or attrs.name in names


def _subject_matches(subject: Any, user: UserInfo, binding_namespace: str) -> bool:
    if not isinstance(subject, dict):
        return False
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.name == f"system:serviceaccount:{namespace}:{name}"
    return False


def _describe_subject(subject: dict, binding_namespace: str) -> str:
    kind = subject.get("kind", "")
    if kind == "ServiceAccount":
        return f'{kind} "{subject.get("name")}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{subject.get("name")}"'


# ------------------------------------------------------------------------------------ the authorizer


class RBACAuthorizer:
    """RBAC over a Store's Roles, ClusterRoles and bindings (see the module docstring)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._index: tuple[list[dict], dict[str, list[dict]], dict[str, dict], dict[tuple[str, str], dict]] | None = (
            None
        )
        store.add_listener(self._on_event)

    def _on_event(self, event_type: str, resource: str, old: dict | None, new: dict | None) -> None:
        if resource in RBAC_RESOURCES:
            self._index = None

    def _indexed(self) -> tuple[list[dict], dict[str, list[dict]], dict[str, dict], dict[tuple[str, str], dict]]:
        if self._index is None:
            store = self._store
            cluster_bindings = store.list(CLUSTER_ROLE_BINDINGS)[0]
            bindings: dict[str, list[dict]] = {}
            for rb in store.list(ROLE_BINDINGS)[0]:
                bindings.setdefault(rb["metadata"].get("namespace", ""), []).append(rb)
            cluster_roles = {cr["metadata"]["name"]: cr for cr in store.list(CLUSTER_ROLES)[0]}
            roles = {(r["metadata"].get("namespace", ""), r["metadata"]["name"]): r for r in store.list(ROLES)[0]}
            self._index = (cluster_bindings, bindings, cluster_roles, roles)
        return self._index

    def _role_rules(self, ref: Any, binding_namespace: str) -> tuple[list[dict], str | None]:
        """(rules, error) of a binding's roleRef, like GetRoleReferenceRules."""
        _, _, cluster_roles, roles = self._indexed()
        ref = ref if isinstance(ref, dict) else {}
        kind, name = ref.get("kind"), ref.get("name", "")
        if kind == "ClusterRole":
            role = cluster_roles.get(name)
            if role is None:
                return [], f'clusterrole.rbac.authorization.k8s.io "{name}" not found'
        elif kind == "Role":
            role = roles.get((binding_namespace, name))
            if role is None:
                return [], f'role.rbac.authorization.k8s.io "{name}" not found'
        else:
            return [], f'unsupported role reference kind: "{kind}"'
        rules = role.get("rules") or []
        return [r for r in rules if isinstance(r, dict)], None

    def _visit(self, user: UserInfo, namespace: str):
        """(binding, binding kind, binding namespace, rules, error) for every binding naming ``user``."""
        cluster_bindings, bindings, _, _ = self._indexed()
        for crb in cluster_bindings:
            if any(_subject_matches(s, user, "") for s in crb.get("subjects") or ()):
                rules, error = self._role_rules(crb.get("roleRef"), "")
                yield crb, "ClusterRoleBinding", "", rules, error
        if namespace:
            for rb in bindings.get(namespace, ()):
                if any(_subject_matches(s, user, namespace) for s in rb.get("subjects") or ()):
                    rules, error = self._role_rules(rb.get("roleRef"), namespace)
                    yield rb, "RoleBinding", namespace, rules, error

    def authorize(self, attrs: Attributes) -> tuple[bool, str]:
        if SUPERUSER_GROUP in attrs.user.groups:
            return True, ""
        errors: list[str] = []
        for binding, kind, namespace, rules, error in self._visit(attrs.user, attrs.namespace):
            if error is not None:
                errors.append(error)
                continue
            if any(rule_allows(attrs, rule) for rule in rules):
                subject = next(s for s in binding.get("subjects") or () if _subject_matches(s, attrs.user, namespace))
                ref = binding.get("roleRef") or {}
                where = f'{kind} "{binding["metadata"]["name"]}' + (f'/{namespace}"' if namespace else '"')
                return True, (
                    f'RBAC: allowed by {where} of {ref.get("kind")} "{ref.get("name")}" to '
                    f"{_describe_subject(subject, namespace)}"
                )
        if errors:
            return False, "RBAC: " + ", ".join(sorted(set(errors)))
        return False, ""

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[dict], list[dict], str]:
        """(resourceRules, nonResourceRules, evaluationError) as SelfSubjectRulesReview reports them."""
        resource_rules: list[dict] = []
        non_resource_rules: list[dict] = []
        errors: list[str] = []
        for _binding, _kind, _namespace, rules, error in self._visit(user, namespace):
            if error is not None:
                errors.append(error)
            for rule in rules:
                if rule.get("nonResourceURLs"):
                    non_resource_rules.append(
                        {"verbs": list(rule.get("verbs") or ()), "nonResourceURLs": list(rule["nonResourceURLs"])}
                    )
                else:
                    out = {
                        "verbs": list(rule.get("verbs") or ()),
                        "apiGroups": list(rule.get("apiGroups") or ()),
                        "resources": list(rule.get("resources") or ()),
                    }
                    if rule.get("resourceNames"):
                        out["resourceNames"] = list(rule["resourceNames"])
                    resource_rules.append(out)
        return resource_rules, non_resource_rules, ", ".join(sorted(set(errors)))


def forbidden(attrs: Attributes, reason: str) -> ApiError:
    """The 403 kube-apiserver answers (responsewriters.Forbidden)."""
    user = attrs.user.name
    if not attrs.resource_request:
        message = f'forbidden: User "{user}" cannot {attrs.verb} path "{attrs.path}"'
        details: dict[str, Any] = {}
    else:
        resource = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
        combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        subject = f'{resource} "{attrs.name}"' if attrs.name else resource
        scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
        message = (
            f'{subject} is forbidden: User "{user}" cannot {attrs.verb} resource "{combined}" in API group '
            f'"{attrs.api_group}" {scope}'
        )
        details = {}
        if attrs.name:
            details["name"] = attrs.name
        if attrs.api_group:
            details["group"] = attrs.api_group
        details["kind"] = attrs.resource
    if reason:
        message += ": " + reason
    return ApiError(403, "Forbidden", html.escape(message, quote=False), details or None)


# ------------------------------------------------------------------------------------ bootstrap policy

_BOOTSTRAP_META = {
    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
}
_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]


def _role(
    name: str, rules: list[dict], *, aggregate_to: str | None = None, aggregate_from: list[str] | None = None
) -> dict:
    meta: dict[str, Any] = {
        "name": name,
        "labels": dict(_BOOTSTRAP_META["labels"]),
        "annotations": dict(_BOOTSTRAP_META["annotations"]),
    }
    if aggregate_to:
        meta["labels"][f"rbac.authorization.k8s.io/aggregate-to-{aggregate_to}"] = "true"
    role: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta,
        "rules": rules,
    }
    if aggregate_from:
        role["aggregationRule"] = {
            "clusterRoleSelectors": [
                {"matchLabels": {f"rbac.authorization.k8s.io/aggregate-to-{label}": "true"}} for label in aggregate_from
            ]
        }
        role["rules"] = []
    return role


def _binding(name: str, role: str, groups: list[str]) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": name,
            "labels": dict(_BOOTSTRAP_META["labels"]),
            "annotations": dict(_BOOTSTRAP_META["annotations"]),
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups],
    }


def bootstrap_objects() -> list[tuple[str, dict]]:
    """(resource, object) of the default RBAC policy, in creation order."""
    view = [
        {
            "apiGroups": [""],
            "resources": [
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "pods",
                "replicationcontrollers",
                "services",
                "serviceaccounts",
                "events",
                "limitranges",
                "resourcequotas",
                "namespaces",
                "pods/log",
                "pods/status",
                "services/status",
            ],
            "verbs": _READ,
        },
        {
            "apiGroups": ["apps"],
            "resources": [
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "daemonsets",
            ],
            "verbs": _READ,
        },
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": _READ},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": _READ},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets", "poddisruptionbudgets/status"], "verbs": _READ},
    ]
    edit = [
        {
            "apiGroups": [""],
            "resources": ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "pods/eviction"],
            "verbs": _WRITE,
        },
        {
            "apiGroups": [""],
            "resources": [
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "secrets",
                "serviceaccounts",
                "services",
            ],
            "verbs": _WRITE,
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": _READ},
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
        {
            "apiGroups": ["apps"],
            "resources": [
                "deployments",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "daemonsets",
            ],
            "verbs": _WRITE,
        },
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": _WRITE},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": _WRITE},
    ]
    admin = [
        {"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"], "verbs": ["create"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"], "verbs": _READ + _WRITE},
    ]
    discovery_urls = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi",
        "/openapi/*",
        "/readyz",
        "/version",
        "/version/",
    ]
    public_urls = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
    return [
        (
            CLUSTER_ROLES,
            _role(
                "cluster-admin",
                [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["*"]}],
            ),
        ),
        (CLUSTER_ROLES, _role("admin", [], aggregate_from=["admin"])),
        (CLUSTER_ROLES, _role("edit", [], aggregate_to="admin", aggregate_from=["edit"])),
        (CLUSTER_ROLES, _role("view", [], aggregate_to="edit", aggregate_from=["view"])),
        (CLUSTER_ROLES, _role("system:aggregate-to-admin", admin, aggregate_to="admin")),
        (CLUSTER_ROLES, _role("system:aggregate-to-edit", edit, aggregate_to="edit")),
        (CLUSTER_ROLES, _role("system:aggregate-to-view", view, aggregate_to="view")),
        (CLUSTER_ROLES, _role("system:discovery", [{"nonResourceURLs": discovery_urls, "verbs": ["get"]}])),
        (CLUSTER_ROLES, _role("system:public-info-viewer", [{"nonResourceURLs": public_urls, "verbs": ["get"]}])),
        (
            CLUSTER_ROLES,
            _role(
                "system:basic-user",
                [
                    {
                        "apiGroups": ["authorization.k8s.io"],
                        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                        "verbs": ["create"],
                    },
                    {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
                ],
            ),
        ),
        (CLUSTER_ROLE_BINDINGS, _binding("cluster-admin", "cluster-admin", [SUPERUSER_GROUP])),
        (CLUSTER_ROLE_BINDINGS, _binding("system:discovery", "system:discovery", [AUTHENTICATED])),
        (CLUSTER_ROLE_BINDINGS, _binding("system:basic-user", "system:basic-user", [AUTHENTICATED])),
        (
            CLUSTER_ROLE_BINDINGS,
            _binding("system:public-info-viewer", "system:public-info-viewer", [AUTHENTICATED, UNAUTHENTICATED]),
        ),
    ]


# ------------------------------------------------------------------------------------ aggregation


def aggregated_rules(role: dict, cluster_roles: list[dict]) -> list[dict] | None:
    """The rules an aggregated ClusterRole should have, or None when it has no aggregationRule."""
    rule = role.get("aggregationRule")
    if not isinstance(rule, dict):
        return None
    selectors = []
    for raw in rule.get("clusterRoleSelectors") or ():
        try:
            selectors.append(label_selector_from_dict(raw))
        except ValueError:
            continue
    name = role["metadata"]["name"]
    out: list[dict] = []
    for other in sorted(cluster_roles, key=lambda r: r["metadata"]["name"]):
        if other["metadata"]["name"] == name:
            continue
        labels = other["metadata"].get("labels") or {}
        if not any(s.matches(labels) for s in selectors):
            continue
        for r in other.get("rules") or ():
            if r not in out:
                out.append(r)
    return out


class ClusterRoleAggregator:
    """The clusterrole-aggregation controller. ``await run()``; cancel to stop."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._wake: anyio.Event | None = None
        self._dirty = True

    def _on_event(self, event_type: str, resource: str, old: dict | None, new: dict | None) -> None:
        if resource == CLUSTER_ROLES:
            self._dirty = True
            if self._wake is not None:
                self._wake.set()

    async def run(self) -> None:
        self._wake = anyio.Event()
        unsubscribe = self._store.add_listener(self._on_event)
        try:
            while True:
                if self._dirty:
                    self._dirty = False
                    self.sync()
                    continue
                self._wake = anyio.Event()
                await self._wake.wait()
        finally:
            unsubscribe()

    def sync(self) -> None:
        roles = self._store.list(CLUSTER_ROLES)[0]
        for role in roles:
            rules = aggregated_rules(role, roles)
            if rules is None or rules == (role.get("rules") or []):
                continue
            try:
                self._store.patch(
                    CLUSTER_ROLES,
                    None,
                    role["metadata"]["name"],
                    "merge",
                    {"rules": rules},
                    field_manager="clusterrole-aggregation-controller",
                )
            except ApiError as err:  # deleted meanwhile: the next change re-runs the sync
                log.info("cluster role aggregation failed", role=role["metadata"]["name"], message=err.message)
