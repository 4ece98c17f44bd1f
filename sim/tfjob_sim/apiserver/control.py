"""The simulator's own control API under ``/_sim/``: the request log, fault rules, watch faults, the
store's change history, bulk writes, compaction, restarts, pausing the kubelet and the GC, node readiness.

Why over HTTP: tests, benchmarks and ``kubectl``-driven demos in other processes steer the cluster the way
the in-process API (:class:`tfjob_sim.faults.Faults`) does. A malformed request is a 400 with
``{"error": ...}``; an unknown path is the plain-text 404.

Routes (method and path after ``/_sim``): ``CONTROL_ROUTES`` below, then ``DELETE /faults/{id}`` and
``POST /nodes/{name}/ready``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from tfjob_sim import errors
from tfjob_sim.apiserver.common import ApiServer, error_response, json_response
from tfjob_sim.errors import ApiError
from tfjob_sim.store import WriteOptions

ControlHandler = Callable[[ApiServer, web.BaseRequest, dict], web.Response]


async def serve(server: ApiServer, request: web.BaseRequest) -> web.StreamResponse:
    """Answer a ``/_sim/`` request; its errors as a Status, its malformed arguments as a 400."""
    try:
        return await _serve(server, request)
    except ApiError as err:
        return error_response(err)
    except (ValueError, TypeError, KeyError, RuntimeError) as exc:
        return json_response({"error": f"{type(exc).__name__}: {exc}"}, 400)


async def _serve(server: ApiServer, request: web.BaseRequest) -> web.StreamResponse:
    path = request.path[len("/_sim") :].rstrip("/")
    method = request.method
    body: dict = {}
    if method in ("POST", "PUT") and request.can_read_body:
        raw = await request.read()
        if raw.strip():
            try:
                parsed = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"body is not JSON: {exc}") from None
            if not isinstance(parsed, dict):
                raise ValueError("body must be a JSON object")
            body = parsed
    handler = CONTROL_ROUTES.get((method, path))
    if handler is not None:
        return handler(server, request, body)
    if path.startswith("/faults/") and method == "DELETE":
        server.faults.remove(int(path.rsplit("/", 1)[1]))
        return json_response({"removed": True})
    if path.startswith("/nodes/") and path.endswith("/ready") and method == "POST":
        name = path[len("/nodes/") : -len("/ready")]
        if "ready" not in body or not isinstance(body["ready"], bool):
            raise ValueError('body must be {"ready": true|false}')
        server.faults.set_node_ready(name, body["ready"])
        return json_response({"node": name, "ready": body["ready"]})
    raise errors.page_not_found()


# ------------------------------------------------------------------ the request log


def _requests(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    """The requests logged after mark ``since``, with their counts by verb and resource."""
    faults = server.faults
    records = faults.requests(int(request.query.get("since", "0")))
    counts: dict[str, int] = {}
    for r in records:
        if r.verb:
            key = f"{r.verb} {r.resource}"
            counts[key] = counts.get(key, 0) + 1
    return json_response({"mark": faults.mark(), "counts": counts, "requests": [r.to_dict() for r in records]})


def _requests_summary(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    since = int(request.query.get("since", "0"))
    return json_response({"mark": server.faults.mark(), "byUserAgent": server.faults.counts_by_user_agent(since)})


def _mark(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    return json_response({"mark": server.faults.mark()})


# ------------------------------------------------------------------ fault rules


def _list_faults(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    return json_response({"faults": [r.to_dict() for r in server.faults.rules]})


def _clear_faults(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    server.faults.clear()
    return json_response({"cleared": True})


def _add_fault(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    """A latency (``latency``), dropped connections (``drop``) or an error answer (``code``) for the requests
    of a verb and resource (``*`` for any), optionally of one user agent, at a rate or a count of times."""
    faults = server.faults
    verb = body.get("verb", "*")
    resource = body.get("resource", "*")
    agent = body.get("userAgent")
    if agent is not None and not isinstance(agent, str):
        raise ValueError("userAgent must be a string")
    if body.get("latency"):
        rule = faults.add_latency(float(body["latency"]), verb, resource, user_agent=agent)
    elif body.get("drop"):
        rule = faults.drop_connections(
            verb, resource, rate=float(body.get("rate", 1.0)), count=body.get("count"), user_agent=agent
        )
    else:
        rule = faults.fail(
            verb,
            resource,
            int(body.get("code", 500)),
            rate=float(body.get("rate", 1.0)),
            count=body.get("count"),
            retry_after=body.get("retryAfter"),
            message=body.get("message"),
            user_agent=agent,
        )
    return json_response(rule.to_dict(), 201)


# ------------------------------------------------------------------ watches


def _watches(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    return json_response(
        {
            "watches": [
                {
                    "resource": w.resource,
                    "namespace": w.namespace,
                    "stalled": w.stalled,
                    "userAgent": w.user_agent,
                }
                for w in server.hub.watchers()
            ]
        }
    )


def _close_watches(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    return json_response({"closed": server.faults.close_watches(body.get("resource"))})


def _stall_watches(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    return json_response(
        {"stalled": server.faults.stall_watches(body.get("resource"), bool(body.get("includeNew", False)))}
    )


def _unstall_watches(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    return json_response({"closed": server.faults.unstall_watches()})


def _delay_watches(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    server.faults.delay_watch_events(float(body.get("seconds", 0)), body.get("resource"), body.get("userAgent"))
    return json_response({"delay": float(body.get("seconds", 0))})


# ------------------------------------------------------------------ the store and the cluster


def _history(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    """The store's retained change history of ``resource`` after RV ``since``, one compact line per
    change with the time the store committed it: benchmarks time what happened inside the cluster
    (a pod removed, a replacement created, a job turning Running) without an observer's lag."""
    resource = request.query["resource"]
    since = int(request.query.get("since", "0"))
    store = server.store
    events = store.history_since(resource, since)
    if events is None:
        raise errors.expired(f"history of {resource} after resourceVersion {since} is no longer retained")
    out = []
    for ev in events:
        obj = ev.object
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        line: dict[str, Any] = {
            "rv": ev.rv,
            "type": ev.type,
            "time": ev.time,
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "uid": meta.get("uid"),
        }
        if meta.get("deletionTimestamp"):
            line["deleting"] = True
        if isinstance(status, dict):
            if status.get("phase"):
                line["phase"] = status["phase"]
            conditions = status.get("conditions")
            if isinstance(conditions, list):
                line["true"] = [c.get("type") for c in conditions if isinstance(c, dict) and c.get("status") == "True"]
        out.append(line)
    return json_response({"resourceVersion": store.resource_version, "events": out})


def _bulk_write(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    """Create (or, with ``subresource: status``, replace the status of) many objects in one call,
    through the same store writes as the API: benchmarks set up a converged cluster of 10,000 jobs
    in seconds instead of minutes of HTTP round trips. The requests are not in the request log."""
    store = server.store
    resource = body["resource"]
    namespace = body.get("namespace")
    subresource = body.get("subresource")
    if subresource not in (None, "status"):
        raise ValueError(f"subresource must be absent or 'status', got {subresource!r}")
    items = body.get("items")
    if not isinstance(items, list):
        raise ValueError("items must be a list of objects")
    opts = WriteOptions(field_manager=body.get("fieldManager") or "sim-bulk")
    written, failed = [], []
    for item in items:
        try:
            if subresource is None:
                obj = store.create_ex(resource, namespace, item, opts, owned=True).obj
            else:
                obj = store.update_ex(
                    resource, namespace, item["metadata"]["name"], item, subresource, opts, owned=True
                ).obj
        except ApiError as err:
            failed.append({"name": (item.get("metadata") or {}).get("name"), "code": err.code, "message": err.message})
            continue
        meta = obj["metadata"]
        written.append({"name": meta["name"], "uid": meta["uid"], "resourceVersion": meta["resourceVersion"]})
    return json_response({"items": written, "errors": failed})


def _compact(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    return json_response({"compactedAt": server.faults.compact()})


def _restart(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
    server.schedule_restart()
    return json_response({"restarting": True}, 202)


def _call(method: str) -> ControlHandler:
    """A route that calls the fault injector's ``method`` (pausing and resuming the kubelet and the GC)."""

    def handler(server: ApiServer, request: web.BaseRequest, body: dict) -> web.Response:
        getattr(server.faults, method)()
        return json_response({"ok": True})

    return handler


CONTROL_ROUTES: dict[tuple[str, str], ControlHandler] = {
    ("GET", "/requests"): _requests,
    ("GET", "/requests/summary"): _requests_summary,
    ("POST", "/requests/mark"): _mark,
    ("GET", "/history"): _history,
    ("POST", "/objects"): _bulk_write,
    ("GET", "/faults"): _list_faults,
    ("DELETE", "/faults"): _clear_faults,
    ("POST", "/faults"): _add_fault,
    ("GET", "/watches"): _watches,
    ("POST", "/watches/close"): _close_watches,
    ("POST", "/watches/stall"): _stall_watches,
    ("POST", "/watches/unstall"): _unstall_watches,
    ("POST", "/watches/delay"): _delay_watches,
    ("POST", "/compact"): _compact,
    ("POST", "/restart"): _restart,
    ("POST", "/kubelet/pause"): _call("pause_kubelet"),
    ("POST", "/kubelet/resume"): _call("resume_kubelet"),
    ("POST", "/gc/pause"): _call("pause_gc"),
    ("POST", "/gc/resume"): _call("resume_gc"),
}
"""The exact ``(method, path)`` routes of the control API."""
