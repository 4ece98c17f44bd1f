"""What a container's process is given: its environment (values and the downward API), command line
and credentials, computed from the pod as the kubelet computes them.

Contract:
- :func:`container_env` returns the environment (``env`` in order, ``envFrom`` first, ``$(VAR)``
  references expanded as the kubelet expands them, then the image's ``PATH`` and ``HOSTNAME``
  unless the container set them: the ``bin`` of the local environment mapped to the image first, then
  the simulator's own PATH); :class:`ConfigError` (the kubelet's ``CreateContainerConfigError``
  message) for a reference it cannot resolve.
- :func:`command_line` is ``command`` + ``args`` expanded with that environment; None when the
  container has no ``command`` (no image supplies an entrypoint here); a relative ``command[0]`` is
  looked up on the container's PATH when it is executed.
- :func:`credentials` resolves ``runAsUser``/``runAsGroup``/``supplementalGroups`` (container level
  over pod level) and ``runAsNonRoot``.
"""

from __future__ import annotations

import base64
import os
import pwd
import re
from typing import Any, Protocol

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ConfigError(ValueError):
    """The container cannot be configured (kubelet: CreateContainerConfigError)."""


class StoreReader(Protocol):
    def get(self, resource: str, namespace: str | None, name: str) -> dict | None: ...


_VAR = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")
_LABEL_PATH = re.compile(r"^metadata\.(labels|annotations)\['([^']*)'\]$")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR_NAME) expansion: a defined variable is replaced, an undefined reference is
    left as written, ``$$`` is an escaped ``$``."""

    def one(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR.sub(one, text)


def field_value(pod: dict, path: str, pod_ip: str | None, host_ip: str | None) -> str:
    """The downward API's fieldRef values the kubelet resolves for env."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName") or spec.get("serviceAccount") or "default",
        "status.podIP": pod_ip or "",
        "status.podIPs": pod_ip or "",
        "status.hostIP": host_ip or "",
        "status.hostIPs": host_ip or "",
    }
    if path in simple:
        return simple[path]
    match = _LABEL_PATH.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ConfigError(f'unsupported fieldRef fieldPath "{path}"')


def _key_ref(store: StoreReader, namespace: str, ref: dict, kind: str) -> str | None:
    resource = "configmaps" if kind == "configMap" else "secrets"
    name, key = ref.get("name", ""), ref.get("key", "")
    obj = store.get(resource, namespace, name)
    optional = bool(ref.get("optional"))
    if obj is None:
        if optional:
            return None
        raise ConfigError(f'{kind} "{name}" not found')
    if kind == "configMap":
        if key in (obj.get("data") or {}):
            return str(obj["data"][key])
    else:
        if key in (obj.get("data") or {}):
            return base64.b64decode(obj["data"][key]).decode(errors="replace")
        if key in (obj.get("stringData") or {}):
            return str(obj["stringData"][key])
    if optional:
        return None
    raise ConfigError(
        f"couldn't find key {key} in {'ConfigMap' if kind == 'configMap' else 'Secret'} {namespace}/{name}"
    )


def container_env(
    store: StoreReader,
    pod: dict,
    container: dict,
    pod_ip: str | None,
    host_ip: str | None,
    image_dir: str | None = None,
) -> dict[str, str]:
    """The container's environment; ``image_dir``: the local environment standing for its image."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        for kind in ("configMap", "secret"):
            ref = source.get(kind + "Ref")
            if ref is None:
                continue
            obj = store.get("configmaps" if kind == "configMap" else "secrets", namespace, ref.get("name", ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{kind} "{ref.get("name", "")}" not found')
            data = dict(obj.get("data") or {})
            if kind == "secret":
                data = {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
            for key, text in data.items():
                env[prefix + key] = str(text)
    for var in container.get("env") or []:
        name = var.get("name", "")
        if "value" in var or "valueFrom" not in var:
            env[name] = expand(str(var.get("value") or ""), env)
            continue
        source = var.get("valueFrom") or {}
        value: str | None
        if "fieldRef" in source:
            value = field_value(pod, (source["fieldRef"] or {}).get("fieldPath", ""), pod_ip, host_ip)
        elif "configMapKeyRef" in source:
            value = _key_ref(store, namespace, source["configMapKeyRef"] or {}, "configMap")
        elif "secretKeyRef" in source:
            value = _key_ref(store, namespace, source["secretKeyRef"] or {}, "secret")
        elif "resourceFieldRef" in source:
            value = _resource_field(container, source["resourceFieldRef"] or {})
        else:
            raise ConfigError(f"env {name}: unsupported valueFrom {sorted(source)}")
        if value is not None:
            env[name] = value
    path = os.environ.get("PATH") or DEFAULT_PATH
    env.setdefault("PATH", os.path.join(image_dir, "bin") + os.pathsep + path if image_dir else path)
    env.setdefault("HOSTNAME", pod_hostname(pod))
    return env


def _resource_field(container: dict, ref: dict) -> str:
    from tfjob_sim.quantity import parse_quantity

    resource = ref.get("resource", "")
    kind, _, name = resource.partition(".")
    value = ((container.get("resources") or {}).get(kind) or {}).get(name)
    if value is None:
        raise ConfigError(f'resourceFieldRef "{resource}" has no value in the container (no node allocatable here)')
    divisor = parse_quantity(ref.get("divisor") or "1")
    amount = parse_quantity(value) / divisor
    return str(int(-(-amount // 1)))  # the kubelet rounds up


def pod_hostname(pod: dict) -> str:
    spec = pod.get("spec") or {}
    return (spec.get("hostname") or (pod.get("metadata") or {}).get("name", ""))[:63]


def command_line(container: dict, env: dict[str, str]) -> list[str] | None:
    command = container.get("command")
    if not command:
        return None
    return [expand(str(part), env) for part in list(command) + list(container.get("args") or [])]


def credentials(pod: dict, container: dict) -> tuple[int | None, int | None, tuple[int, ...]]:
    pod_ctx = (pod.get("spec") or {}).get("securityContext") or {}
    ctx = container.get("securityContext") or {}

    def pick(key: str) -> Any:
        return ctx[key] if ctx.get(key) is not None else pod_ctx.get(key)

    uid, gid = pick("runAsUser"), pick("runAsGroup")
    if pick("runAsNonRoot") and not uid:
        raise ConfigError(
            "container has runAsNonRoot and image will run as root"
            if uid is None
            else "container's runAsUser breaks non-root policy"
        )
    groups = [g for g in pod_ctx.get("supplementalGroups") or [] if isinstance(g, int)]
    if isinstance(pod_ctx.get("fsGroup"), int):
        groups.append(pod_ctx["fsGroup"])
    if uid is not None and gid is None:
        # The image's user database decides the primary group; the image is this machine.
        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            gid = 0
    return uid, gid, tuple(groups)


def memory_limit(container: dict) -> int | None:
    from tfjob_sim.quantity import parse_quantity

    value = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    if value is None:
        return None
    try:
        return int(parse_quantity(value))
    except ValueError as exc:
        raise ConfigError(f"resources.limits.memory: {exc}") from None
