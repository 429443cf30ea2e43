"""A scriptable loopback HTTP server that speaks chat-completions SSE, for adapter tests.

It runs an ``asyncio`` server on its own event loop in a daemon thread, bound to
``127.0.0.1:0``, so it works under any test (sync or async) and its timing is independent of the
client's loop. Each incoming request consumes the next scripted :class:`Reply` (FIFO); with the
script empty it answers HTTP 500. Every request is recorded (:class:`Recorded`) with its parsed
JSON body. Connections are keep-alive, so the SDK may reuse one for a retry.

Usage::

    with SSEServer() as server:
        server.push(Reply.sse([chunk(content="hi"), chunk(finish="stop")]))
        client_base_url = server.base_url

Replies:

- ``Reply.sse(payloads, ...)``: HTTP 200 ``text/event-stream``; each payload (a dict is JSON-encoded,
  a str is sent verbatim as the ``data:`` value) becomes one SSE event, then ``data: [DONE]``.
  ``delay`` pauses before each event; ``done=False`` omits ``[DONE]``; ``drop_after=n`` cuts the
  TCP connection abruptly after ``n`` events (mid chunked body); ``chunked=False`` sends an
  EOF-delimited body (``Connection: close``) instead of chunked encoding.
- ``Reply.json(status, body, headers=...)``: a plain JSON response (errors).
- ``Reply.hang(seconds)``: accept the request and send nothing for ``seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Recorded", "Reply", "SSEServer", "chunk", "usage_chunk"]


# --------------------------------------------------------------------------- wire payload helpers


def chunk(
    *,
    content: str | None = None,
    reasoning: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
    role: str | None = None,
    model: str = "test-model",
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with a single choice."""
    delta: dict[str, Any] = {}
    if role is not None:
        delta["role"] = role
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    out: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def usage_chunk(usage: dict[str, Any], model: str = "test-model") -> dict[str, Any]:
    """The trailing usage-only chunk (``choices: []``) of ``stream_options.include_usage``."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [],
        "usage": usage,
    }


# --------------------------------------------------------------------------- script


@dataclass
class Reply:
    """One scripted response."""

    kind: str  # "sse" | "json" | "hang"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    events: list[bytes] = field(default_factory=list)
    delay: float = 0.0
    first_delay: float = 0.0
    done: bool = True
    drop_after: int | None = None
    chunked: bool = True
    hang: float = 0.0

    @classmethod
    def sse(
        cls,
        payloads: list[dict[str, Any] | str],
        *,
        delay: float = 0.0,
        first_delay: float = 0.0,
        done: bool = True,
        drop_after: int | None = None,
        chunked: bool = True,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        events = []
        for payload in payloads:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            events.append(f"data: {data}\n\n".encode())
        return cls(
            kind="sse",
            events=events,
            delay=delay,
            first_delay=first_delay,
            done=done,
            drop_after=drop_after,
            chunked=chunked,
            headers=dict(headers or {}),
        )

    @classmethod
    def json(cls, status: int, body: object, *, headers: dict[str, str] | None = None) -> Reply:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return cls(kind="json", status=status, body=raw, headers=dict(headers or {}))

    @classmethod
    def error(cls, status: int, message: str, *, headers: dict[str, str] | None = None) -> Reply:
        """An OpenAI-style error body ``{"error": {"message", "type", "code"}}``."""
        body = {"error": {"message": message, "type": "test_error", "code": None}}
        return cls.json(status, body, headers=headers)

    @classmethod
    def hanging(cls, seconds: float) -> Reply:
        return cls(kind="hang", hang=seconds)


@dataclass
class Recorded:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float
    disconnected_at: float | None = None

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class SSEServer:
    """The loopback server (a context manager; ``start()``/``stop()`` also work)."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = threading.Lock()
        self._disconnects = threading.Condition()

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> SSEServer:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        fut.result(timeout=5)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        self._loop.close()

    def __enter__(self) -> SSEServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ scripting

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def _next(self) -> Reply:
        with self._lock:
            if self.replies:
                return self.replies.popleft()
        return Reply.error(500, "no scripted reply")

    def wait_for_disconnect(self, index: int = -1, timeout: float = 2.0) -> float | None:
        """Block until request ``index``'s connection was seen closed; its time, or ``None``."""

        def closed() -> float | None:
            return self.requests[index].disconnected_at if self.requests else None

        with self._disconnects:
            self._disconnects.wait_for(lambda: closed() is not None, timeout)
        return closed()

    def _disconnected(self, record: Recorded) -> None:
        with self._disconnects:
            record.disconnected_at = time.monotonic()
            self._disconnects.notify_all()

    # ------------------------------------------------------------------ HTTP

    @staticmethod
    async def _pause(reader: asyncio.StreamReader, seconds: float) -> None:
        """Sleep, but notice within ~5 ms that the client closed the connection."""
        deadline = time.monotonic() + seconds
        while True:
            if reader.at_eof():
                raise ConnectionResetError("client closed the connection")
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, 0.005))  # a scripted delay that notices a close

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                keep_alive = await self._one(reader, writer)
                if not keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        body = await reader.readexactly(length) if length else b""
        record = Recorded(method, path, headers, body, time.monotonic())
        self.requests.append(record)
        reply = self._next()

        if reply.kind == "hang":
            await asyncio.sleep(reply.hang)  # scripted: a server that never answers
            return False

        if reply.kind == "json":
            head_lines = [
                f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}",
                "Content-Type: application/json",
                f"Content-Length: {len(reply.body)}",
            ]
            head_lines += [f"{k}: {v}" for k, v in reply.headers.items()]
            writer.write(("\r\n".join(head_lines) + "\r\n\r\n").encode() + reply.body)
            await writer.drain()
            return True

        # SSE
        head_lines = [
            "HTTP/1.1 200 OK",
            "Content-Type: text/event-stream",
            "Cache-Control: no-cache",
        ]
        head_lines.append("Transfer-Encoding: chunked" if reply.chunked else "Connection: close")
        head_lines += [f"{k}: {v}" for k, v in reply.headers.items()]
        writer.write(("\r\n".join(head_lines) + "\r\n\r\n").encode())
        await writer.drain()

        def frame(data: bytes) -> bytes:
            return b"%x\r\n%s\r\n" % (len(data), data) if reply.chunked else data

        events = list(reply.events)
        if reply.done:
            events.append(b"data: [DONE]\n\n")
        try:
            if reply.first_delay:
                await self._pause(reader, reply.first_delay)
            for n, event in enumerate(events):
                if reply.drop_after is not None and n >= reply.drop_after:
                    # Abrupt close in the middle of the body.
                    writer.transport.abort()
                    self._disconnected(record)
                    return False
                if reply.delay and n:
                    await self._pause(reader, reply.delay)
                writer.write(frame(event))
                await writer.drain()
            if reply.chunked:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
                return True
            return False
        except (ConnectionError, asyncio.CancelledError):
            self._disconnected(record)
            raise
