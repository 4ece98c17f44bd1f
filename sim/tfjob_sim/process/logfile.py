"""One container instance's stdout and stderr, captured to a file, as ``pods/log`` serves it.

Why: the kubelet answers ``kubectl logs`` from what the container runtime captured, line by line
with the time each line arrived (``--timestamps``, ``--since``). The runtime reads the process's
pipes and appends here; the file holds the text, memory holds one offset and one time per line.

Contract (the interface of :class:`tfjob_sim.logs.Source`):
- :meth:`append` takes bytes as they arrive; a line is complete at ``\\n``, or at 16 KiB (the
  runtime splits longer lines, as containerd does); :meth:`end` completes a final fragment and
  marks the instance stopped, waking every follower.
- :meth:`read`, :meth:`printed`, :meth:`line_time`, :meth:`wait` serve complete lines only.
- :meth:`close` releases the file descriptor and deletes the file.
"""

from __future__ import annotations

import asyncio
import os
import time
from array import array

MAX_LINE_BYTES = 16 * 1024


class ProcessLog:
    def __init__(self, container_id: str, path: str) -> None:
        self.container_id = container_id
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self._starts = array("q")  # byte offset of each complete line
        self._times = array("d")  # wall time each line arrived
        self._size = 0  # bytes in the file
        self._line_start = 0  # offset of the line being written
        self._line_time: float | None = None  # arrival of its first byte
        self.finished: float | None = None
        self._changed = asyncio.Event()

    # ---------------------------------------------------------------- writing

    def append(self, data: bytes, when: float | None = None) -> None:
        if self._fd is None or self.finished is not None or not data:
            return
        when = time.time() if when is None else when
        os.pwrite(self._fd, data, self._size)
        before = len(self._starts)
        pos = 0
        while pos < len(data):
            if self._line_time is None:
                self._line_time = when
            newline = data.find(b"\n", pos)
            end = self._size + (newline + 1 if newline >= 0 else len(data))
            if end - self._line_start > MAX_LINE_BYTES:  # too long: split, as containerd does
                end = self._line_start + MAX_LINE_BYTES
                pos = end - self._size
            elif newline >= 0:
                pos = newline + 1
            else:
                break  # a fragment: completed by the next newline, or by end()
            self._complete(end)
        self._size += len(data)
        if len(self._starts) != before:
            self._wake()

    def _complete(self, end: int) -> None:
        self._starts.append(self._line_start)
        self._times.append(self._line_time if self._line_time is not None else time.time())
        self._line_start = end
        self._line_time = None

    def end(self, when: float | None = None) -> None:
        """The instance stopped: a last fragment without newline becomes a line; followers finish."""
        if self.finished is not None:
            return
        if self._size > self._line_start:
            self._complete(self._size)
        self.finished = time.time() if when is None else when
        self._wake()

    def _wake(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    def close(self) -> None:
        self.end()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass  # already removed with its directory

    # ---------------------------------------------------------------- reading

    def printed(self, now: float) -> int:
        return len(self._starts)

    def line_time(self, index: int) -> float:
        return self._times[index]

    def read(self, start: int, stop: int) -> list[str]:
        stop = min(stop, len(self._starts))
        if start >= stop or self._fd is None:
            return []
        end = self._starts[stop] if stop < len(self._starts) else self._line_start
        data = os.pread(self._fd, end - self._starts[start], self._starts[start])
        out = []
        for i in range(start, stop):
            a = self._starts[i] - self._starts[start]
            b = (self._starts[i + 1] if i + 1 < len(self._starts) else self._line_start) - self._starts[start]
            out.append(data[a:b].removesuffix(b"\n").decode(errors="replace"))
        return out

    async def wait(self, sent: int) -> None:
        if sent < len(self._starts) or self.finished is not None:
            return
        await self._changed.wait()
