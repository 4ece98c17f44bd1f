"""A deliberately broken ``tfjob-controller``, for the proof that the soak's checker is wired.

It is the real CLI with one bug: every decision rewrites the Running condition's message with the
current second and asks to be requeued within a second, as a controller that "refreshes" its status
on a timer would: it writes on every reconcile and never goes quiet. Run as
``python -m tests.soak.broken_controller <tfjob-controller arguments>``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any

from controller import cli
from controller.tfjob import controller as tfjob_controller

_decide = tfjob_controller.decide


def _noisy_decide(*args: Any, **kwargs: Any) -> Any:
    decision = _decide(*args, **kwargs)
    status = dict(decision.status)
    conditions = [dict(c) for c in status.get("conditions") or []]
    for condition in conditions:
        if condition.get("type") == "Running":
            condition["message"] = f"running (checked at {int(time.time())})"
    status["conditions"] = conditions
    requeue = min(decision.requeue_after, 1.0) if decision.requeue_after is not None else 1.0
    return dataclasses.replace(decision, status=status, requeue_after=requeue)


if __name__ == "__main__":
    tfjob_controller.decide = _noisy_decide
    sys.exit(cli.main(sys.argv[1:]))
