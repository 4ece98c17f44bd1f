"""A watch response as a stream of events: the line splitter and the stream object.

Why our own reader: kubernetes-asyncio's watch builds a model per event and has no inactivity timeout, so
a silently dead connection hangs forever. Here a watch is bytes split into lines (unbounded length, one
copy per line), decoded with orjson into plain dicts, with every way a stream can fail mapped to a typed
error the informer can act on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson

from controller.runtime.errors import ResponseDecodeError, StreamStalled, TransportError

__all__ = ["LineSplitter", "decode_lines", "WatchStream"]


class LineSplitter:
    """Splits a byte stream into ``\\n``-terminated lines; unbounded line length, O(n) total work.

    Chunk boundaries are unrelated to line boundaries (the API server flushes whenever its event channel is
    momentarily empty, and proxies split chunks again): a chunk may hold many lines or a
    fraction of one. ``feed(chunk)`` returns the complete lines it finished (without the newline, empty
    lines dropped); the unfinished tail is kept as a list of pieces and joined once, when its newline
    arrives, so a multi-megabyte line costs one copy, not one per chunk.
    """

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines ``chunk`` completed, in order, without their newline and without empty lines; an
        unfinished tail is kept for the next call."""
        if b"\n" not in chunk:
            if chunk:
                self._pending.append(chunk)
            return []
        lines = chunk.split(b"\n")
        if self._pending:
            self._pending.append(lines[0])
            lines[0] = b"".join(self._pending)
            self._pending = []
        tail = lines.pop()
        if tail:
            self._pending.append(tail)
        if b"" in lines:
            lines = [line for line in lines if line]
        return lines

    def tail(self) -> bytes:
        """Bytes received after the last newline (a truncated line if the stream ended here)."""
        return b"".join(self._pending)


def decode_lines(lines: list[bytes]) -> list[dict[str, Any]]:
    """orjson-decode watch event lines; a line that is not JSON raises :class:`ResponseDecodeError`."""
    loads = orjson.loads
    try:
        return [loads(line) for line in lines]
    except orjson.JSONDecodeError as exc:
        raise ResponseDecodeError(f"watch event is not valid JSON: {exc}") from exc


class WatchStream:
    """One watch request's event stream, decoded into plain dicts.

    Use as ``async with client.watch(...) as stream: async for event in stream: ...`` (or iterate
    ``stream.batches()`` for lists of the events that arrived together — the informer's hot path). Plain
    ``async for event in client.watch(...)`` also works; the response is released when the iteration
    ends or fails. Events are yielded as the server sent them (``{"type", "object"}``), including
    ``BOOKMARK`` and ``ERROR`` — interpreting them is the caller's job.

    Ends normally when the server ends the stream (timeoutSeconds reached, server closed it). Raises
    :class:`~controller.runtime.errors.ApiError` if the watch request itself is refused,
    :class:`StreamStalled` when no byte arrived for ``inactivity_timeout`` seconds, :class:`TransportError`
    when the connection breaks, and :class:`ResponseDecodeError` for a line that is not JSON.
    """

    def __init__(
        self,
        send: Callable[[], Awaitable[aiohttp.ClientResponse]],
        inactivity_timeout: float | None,
    ) -> None:
        # ``send`` sends the watch request and returns the 2xx response with its body unread (the client's
        # request path: limit, credentials, metrics, typed errors).
        self._send = send
        self._inactivity_timeout = inactivity_timeout
        self._response: aiohttp.ClientResponse | None = None
        self._pending: list[dict[str, Any]] = []
        self._pending_index = 0
        self._batches: AsyncIterator[list[dict[str, Any]]] | None = None
        self._closed = False
        self.bytes_read = 0

    async def __aenter__(self) -> WatchStream:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Send the watch request and wait for the response headers (the server flushes them at once);
        a no-op once open. Raises the typed error of a refused request; RuntimeError after :meth:`close`."""
        if self._response is not None:
            return
        if self._closed:
            raise RuntimeError("watch stream already closed")
        self._response = await self._send()

    async def close(self) -> None:
        """Release the connection; idempotent. A closed stream cannot be opened again (RuntimeError)."""
        self._closed = True
        if self._response is not None:
            self._response.release()
            self._response.close()
            self._response = None

    async def lines(self) -> AsyncIterator[list[bytes]]:
        """Raw event lines (JSON, newline stripped) grouped as they arrived: one list per network read that
        completed at least one line. For callers that decode themselves (the informer)."""
        await self.open()
        response = self._response
        assert response is not None
        splitter = LineSplitter()
        try:
            async for chunk in response.content.iter_any():
                self.bytes_read += len(chunk)
                lines = splitter.feed(chunk)
                if lines:
                    yield lines
        except aiohttp.SocketTimeoutError as exc:
            raise StreamStalled(
                f"watch stream sent no bytes for {self._inactivity_timeout} s (stalled connection)"
            ) from exc
        except aiohttp.ClientPayloadError as exc:
            raise TransportError(f"watch stream broken: {exc}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(f"watch stream failed: {type(exc).__name__}: {exc}") from exc
        finally:
            await self.close()
        tail = splitter.tail()
        if tail.strip():
            # The server terminates every event with a newline; an unterminated tail means the body was cut.
            raise TransportError(f"watch stream ended inside an event ({len(tail)} bytes without newline)")

    async def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        """Decoded events grouped as they arrived (see :meth:`lines`)."""
        async for lines in self.lines():
            yield decode_lines(lines)

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._pending_index < len(self._pending):
            event = self._pending[self._pending_index]
            self._pending_index += 1
            return event
        if self._batches is None:
            self._batches = self.batches()
        batch = await self._batches.__anext__()
        self._pending = batch
        self._pending_index = 1
        return batch[0]
