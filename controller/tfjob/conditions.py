"""TFJob status conditions and timestamps: upstream's update algorithm, with terminal states frozen.

Why this module: the condition list is the part of the status that tools read (the printer column
``State`` is the type of the *last* condition; the Kubeflow SDK looks for ``Succeeded``/``Failed``
with status True), so the list must evolve exactly like upstream's ``UpdateJobConditions`` (:func:`set_condition`).

All functions are pure: they return new lists and never mutate their arguments.
Timestamps are RFC 3339 with second precision in UTC (``2024-05-01T12:34:56Z``), as metav1.Time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from . import api

TRUE = "True"
FALSE = "False"


def format_time(moment: datetime) -> str:
    """``moment`` as metav1.Time serialises it (UTC, whole seconds, ``Z``)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_epoch(seconds: float) -> str:
    """An epoch timestamp (seconds) formatted like :func:`format_time`, truncated to the second."""
    return format_time(datetime.fromtimestamp(int(seconds), UTC))


def parse_time(value: Any) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp, or None if ``value`` is not a valid one.

    Float epoch seconds (not datetimes) are used for all time arithmetic so that absurd durations
    from a malformed spec (``activeDeadlineSeconds: 10**18``) cannot overflow.
    """
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    except (ValueError, OverflowError):  # not RFC 3339, or out of datetime's range in UTC
        return None


def find(conditions: list[dict[str, Any]], cond_type: str) -> dict[str, Any] | None:
    """The condition of ``cond_type``, or None."""
    for condition in conditions:
        if condition.get(api.CONDITION_TYPE) == cond_type:
            return condition
    return None


def is_true(conditions: list[dict[str, Any]], cond_type: str) -> bool:
    """Whether the condition of ``cond_type`` exists with status True."""
    condition = find(conditions, cond_type)
    return condition is not None and condition.get(api.CONDITION_STATUS) == TRUE


def is_finished(conditions: list[dict[str, Any]]) -> bool:
    """Succeeded or Failed is True."""
    return is_true(conditions, api.COND_SUCCEEDED) or is_true(conditions, api.COND_FAILED)


def new_condition(cond_type: str, status: str, reason: str, message: str, now: str) -> dict[str, Any]:
    """A fresh condition of ``cond_type`` with both timestamps at ``now``."""
    return {
        api.CONDITION_TYPE: cond_type,
        api.CONDITION_STATUS: status,
        api.CONDITION_REASON: reason,
        api.CONDITION_MESSAGE: message,
        api.CONDITION_LAST_UPDATE_TIME: now,
        api.CONDITION_LAST_TRANSITION_TIME: now,
    }


def set_condition(
    conditions: list[dict[str, Any]],
    cond_type: str,
    status: str,
    reason: str,
    message: str,
    now: str,
) -> list[dict[str, Any]]:
    """The condition list after setting (type, status, reason, message) at ``now``.

    Returns the *same* list object when nothing changes, so callers can detect a transition with
    ``result is not conditions``. Upstream's rules:

    1. if the job is already finished (``Failed=True`` or, our fix for quirk Q1, ``Succeeded=True``),
       nothing changes -- terminal conditions are final and never both True;
    2. a condition of the same type with the same status *and* reason means no change at all
       (timestamps untouched, message ignored) -- this is what makes reconciles idempotent;
    3. the new condition gets lastUpdateTime = lastTransitionTime = now, except that the old
       lastTransitionTime is kept when only the reason changed;
    4. the new list drops the old condition of that type (an updated condition moves to the end);
       ``Running`` and ``Restarting`` exclude each other; adding ``Succeeded``/``Failed`` keeps
       ``Running`` but forces its status to False (and, our addition, does the same to a True
       ``Restarting``, which would otherwise contradict a terminal state).
    """
    if is_finished(conditions):
        return conditions
    current = find(conditions, cond_type)
    if (
        current is not None
        and current.get(api.CONDITION_STATUS) == status
        and current.get(api.CONDITION_REASON) == reason
    ):
        return conditions
    condition = new_condition(cond_type, status, reason, message, now)
    if (
        current is not None
        and current.get(api.CONDITION_STATUS) == status
        and api.CONDITION_LAST_TRANSITION_TIME in current
    ):
        condition[api.CONDITION_LAST_TRANSITION_TIME] = current[api.CONDITION_LAST_TRANSITION_TIME]
    terminal = cond_type in (api.COND_SUCCEEDED, api.COND_FAILED)
    result: list[dict[str, Any]] = []
    for existing in conditions:
        existing_type = existing.get(api.CONDITION_TYPE)
        if existing_type == cond_type:
            continue
        if cond_type == api.COND_RESTARTING and existing_type == api.COND_RUNNING:
            continue
        if cond_type == api.COND_RUNNING and existing_type == api.COND_RESTARTING:
            continue
        if (
            terminal
            and existing_type in (api.COND_RUNNING, api.COND_RESTARTING)
            and existing.get(api.CONDITION_STATUS) != FALSE
        ):
            # Upstream flips only the status (timestamps untouched); we do it for Restarting too.
            existing = {**existing, api.CONDITION_STATUS: FALSE}
        result.append(existing)
    result.append(condition)
    return result


def sanitize(raw: Any) -> list[dict[str, Any]]:
    """The usable conditions of a stored status: objects with string ``type`` and ``status``.

    Malformed entries (written by someone else) are dropped rather than trusted.
    """
    if not isinstance(raw, list):
        return []
    return [
        c
        for c in raw
        if isinstance(c, dict)
        and isinstance(c.get(api.CONDITION_TYPE), str)
        and isinstance(c.get(api.CONDITION_STATUS), str)
    ]
