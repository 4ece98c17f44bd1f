"""Log lines as operators read them (controller.ops.logging), in a child process: configuring structlog is
process-wide and would leak into every other test."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys, structlog
from controller.ops.logging import configure_logging
configure_logging(sys.argv[1])
# Which calls reach the processor chain (timestamps, context merging): a call below the level must not.
chained = []
structlog.configure(processors=[lambda _l, method, e: (chained.append(method), e)[1], *structlog.get_config()["processors"]])
log = structlog.get_logger("controller.test").bind(job="ns/j")
log.debug("debug line")
log.info("info line", n=1)
log.warning("warning line", n=2)
try:
    1 / 0
except ZeroDivisionError:
    log.exception("failed", n=3)
print(json.dumps(chained))
"""


def run(level: str) -> tuple[list[dict], list[str]]:
    """The JSON lines written at ``level``, and the methods of the calls that reached the processor chain."""
    done = subprocess.run([sys.executable, "-c", SCRIPT, level], capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in done.stderr.splitlines()], json.loads(done.stdout)


def lines(level: str) -> list[dict]:
    return run(level)[0]


def test_lines_below_the_level_are_not_written_and_the_others_are_json_with_their_context():
    at_warning = lines("warning")
    assert [(e["event"], e["level"]) for e in at_warning] == [("warning line", "warning"), ("failed", "error")]
    assert all(e["logger"] == "controller.test" and e["job"] == "ns/j" and e["timestamp"] for e in at_warning)
    assert at_warning[0]["n"] == 2
    assert "ZeroDivisionError" in at_warning[1]["exception"]

    assert [e["event"] for e in lines("info")] == ["info line", "warning line", "failed"]
    assert [e["event"] for e in lines("debug")] == ["debug line", "info line", "warning line", "failed"]


def test_calls_below_the_level_return_before_the_processor_chain():
    # A burst logs a debug line per dropped event and an info line per create: at the Deployment's level
    # those must cost a method call, not the timestamp and context processors (docs/benchmarks/profiles).
    assert run("warning")[1] == ["warning", "error"]
    assert run("debug")[1] == ["debug", "info", "warning", "error"]
