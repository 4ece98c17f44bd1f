"""The one way tests wait: poll a condition until it holds, with a deadline.

Tests never sleep to synchronise. A condition (sync or async) is polled every ``interval`` seconds, for up to
``timeout`` (30 s by default: a deadline costs nothing when the condition comes, and a loaded CI machine may
starve a process for seconds);
``tolerate`` lists exceptions that mean "not yet" (e.g. NotFound while an object is being created).
On timeout the test fails with what it waited for and the last value or exception seen.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import anyio
import pytest


async def eventually(
    check: Callable[[], Any],
    timeout: float = 30.0,
    *,
    interval: float = 0.01,
    what: str = "",
    tolerate: tuple[type[BaseException], ...] = (),
) -> Any:
    """Return the first truthy value of ``check()``; fail the test after ``timeout`` seconds."""
    last: Any = None
    try:
        with anyio.fail_after(timeout):
            while True:
                try:
                    value = check()
                    if inspect.isawaitable(value):
                        value = await value
                    if value:
                        return value
                    last = value
                except tolerate as exc:
                    last = exc
                await anyio.sleep(interval)
    except TimeoutError:
        pytest.fail(f"not reached within {timeout} s: {what or check}; last: {last!r}", pytrace=False)


async def never(
    check: Callable[[], Any],
    within: float,
    *,
    interval: float = 0.01,
    what: str = "",
) -> None:
    """Fail the test if ``check()`` (sync or async) is ever truthy during the next ``within`` seconds.

    A "must not happen" can only be watched for a while: ``within`` is how long the test looks, not a speed
    anyone must reach, so a slow machine cannot make it fail, only look less hard. Keep it short; choose it
    so that a broken implementation would have done the forbidden thing well inside it.
    """
    with anyio.move_on_after(within):
        while True:
            value = check()
            if inspect.isawaitable(value):
                value = await value
            if value:
                pytest.fail(
                    f"happened within {within} s although it must not: {what or check}; value: {value!r}", pytrace=False
                )
            await anyio.sleep(interval)
