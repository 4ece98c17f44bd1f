"""Expected API failures are one warning line, never a traceback.

The controller runs against the simulated cluster while it answers pod creates with 503 and then a
status write with 404 (what a job deleted between the read and the write gets). Each failure must
be one structured warning line naming the error, its kind and the retry delay; no error-level line,
no traceback; the failures are counted by kind; and the job still converges.
"""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import Operator, eventually, is_true, running_pods, tfjob

FAILED = "reconcile failed; retrying with backoff"


def by_reason(operator: Operator, reason: str) -> float:
    return operator.metric(
        "controller_runtime_reconcile_errors_by_reason_total", {"controller": "tfjob-controller", "reason": reason}
    )


async def test_unavailability_and_a_not_found_status_write_are_one_warning_line_each(operator: Operator) -> None:
    faults = operator.cluster.faults
    with capture_logs() as logs:
        unavailable = faults.fail("create", "pods", 503, message="etcdserver: leader changed")
        await operator.client.create(TFJOBS, tfjob("noisy", workers=2), namespace="default")

        def failures(reason: str) -> list[dict[str, Any]]:
            return [e for e in logs if e.get("event") == FAILED and e.get("reason") == reason]

        await eventually(lambda: failures("server_error"), what="a reconcile failed by the 503")
        faults.remove(unavailable)
        faults.fail_next("update", "tfjobs.kubeflow.org/status", 404, message='tfjobs.kubeflow.org "noisy" not found')
        await eventually(lambda: failures("not_found"), what="a reconcile failed by the 404 of its status write")

        async def running() -> bool:
            job = await operator.job("noisy")
            return is_true(job, "Running") and len(running_pods(await operator.pods("noisy"))) == 2

        await eventually(running, what="the job running once the API recovered")

    for reason, text in (
        ("server_error", "503 ServiceUnavailable: etcdserver: leader changed"),
        ("not_found", '404 NotFound: tfjobs.kubeflow.org "noisy" not found'),
    ):
        line = failures(reason)[0]
        assert line["log_level"] == "warning", line
        assert line["error"] == text and line["key"] == "default/noisy"
        assert isinstance(line["retry_in"], float) and line["retry_in"] > 0
        assert by_reason(operator, reason) >= 1
    assert [e for e in logs if e.get("log_level") in ("error", "critical")] == []
    assert [e for e in logs if "exc_info" in e or "exception" in e] == []
    assert by_reason(operator, "unexpected") == 0
