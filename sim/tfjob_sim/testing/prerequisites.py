"""What some tests need from the machine beyond the Python packages, and what to do when it is missing.

Why: README's test command must work on a newcomer's machine that lacks root, ``promtool`` or ``ip``: a test that
cannot run there is skipped with the reason and the fix, never ends in a traceback. CI is different: a missing
prerequisite there means ``.ci/run`` failed to install it, so under ``CI=true`` (as CI runs) the test fails
instead: CI never skips.

Mark a test ``@pytest.mark.needs("root", "ip")`` (the suites' conftest.py hook reads the marker), or call
:func:`require` where the need is found (a fixture that starts the process runtime).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Callable

import pytest

# name -> (is it there?, what to do when it is not)
PREREQUISITES: dict[str, tuple[Callable[[], bool], str]] = {
    "linux": (lambda: sys.platform.startswith("linux"), "needs Linux (network and mount namespaces, cgroups)"),
    "root": (lambda: hasattr(os, "geteuid") and os.geteuid() == 0, "needs root (run the test command with sudo)"),
    "ip": (lambda: shutil.which("ip") is not None, "needs iproute2's ip (Debian: apt-get install iproute2)"),
    "kubectl": (
        lambda: shutil.which("kubectl") is not None or os.access("/usr/bin/kubectl", os.X_OK),
        "needs kubectl on PATH (https://kubernetes.io/docs/tasks/tools/)",
    ),
    "promtool": (
        lambda: shutil.which("promtool") is not None,
        "needs promtool (Debian: apt-get install prometheus)",
    ),
    "prometheus": (
        lambda: shutil.which("prometheus") is not None,
        "needs the prometheus server (Debian: apt-get install prometheus)",
    ),
    "tensorflow": (
        lambda: importlib.util.find_spec("tensorflow") is not None,
        "needs TensorFlow (pip install -e '.[tensorflow]')",
    ),
}
# What the process runtime (real processes in their own namespaces) needs.
PROCESS_RUNTIME = ("linux", "root", "ip")


def missing(*names: str) -> list[str]:
    """The reasons, one per prerequisite of ``names`` that this machine lacks. KeyError for an unknown name."""
    return [PREREQUISITES[name][1] for name in names if not PREREQUISITES[name][0]()]


def in_ci() -> bool:
    """Whether this run is CI's (``CI=true``), where nothing may be skipped."""
    return os.environ.get("CI", "").lower() == "true"


def require(*names: str) -> None:
    """Return when the machine has every prerequisite of ``names``; else skip the test with the reasons, or, in
    CI, fail it (pytest's Skipped / Failed outcome exceptions)."""
    reasons = missing(*names)
    if not reasons:
        return
    text = "; ".join(reasons)
    if in_ci():
        pytest.fail(f"CI never skips, and this test {text}", pytrace=False)
    pytest.skip(text)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """The hook the suites' conftest.py use: the ``needs`` markers of a test, required before it runs."""
    for marker in item.iter_markers("needs"):
        require(*marker.args)
