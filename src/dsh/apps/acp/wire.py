"""The stdio transport of ``dsh acp``: newline-delimited JSON-RPC on the process's stdin/stdout.

Why not the package's own: it logs and drops a line that is not JSON, so the client waits
forever; here a malformed line gets a JSON-RPC ``-32700 Parse error`` response, and a JSON value
that is not a request, notification or response gets ``-32600 Invalid Request``, both with
``id: null`` and a message saying what was wrong; the process keeps serving.

Hostile lines are refused here, before the package or a handler sees them (:func:`decode`): a
line nested deeper than ``MAX_DEPTH`` (the decoder would raise ``RecursionError`` and end the
process), ``NaN``/``Infinity`` and numbers out of a double's range (they would be echoed as
invalid JSON), an ``id`` that is not a string, a number or null (``true`` got no answer, ``[]``
ended the receive loop), and lone surrogates in any string (they cannot be encoded, so the
answer was never written).

:func:`claim_stdout` moves the protocol to a private copy of file descriptor 1 and points fd 1
(and ``sys.stdout``) at stderr, so nothing but protocol messages ever reaches the client's pipe,
whatever a library or a child process prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import sys
import threading
from collections.abc import Iterator
from typing import BinaryIO, TypeAlias

__all__ = ["BATCH_BYTES", "MAX_DEPTH", "StdioTransport", "WireMessage", "claim_stdout", "decode"]

BATCH_BYTES = 64 * 1024

MAX_DEPTH = 64
"""Nesting levels of arrays and objects a message may have (ACP's messages need under ten)."""

_SURROGATE = re.compile("[\ud800-\udfff]")

WireMessage: TypeAlias = dict[str, object]
"""One decoded JSON-RPC message (or a part of one, such as an update's params)."""


def claim_stdout() -> BinaryIO:
    """The protocol's output stream; from here on fd 1 and ``sys.stdout`` go to stderr."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


class StdioTransport:
    """An ``acp`` message transport over a byte input and output (by default the real stdio)."""

    def __init__(self, output: BinaryIO, input: BinaryIO | None = None) -> None:
        self._out = output
        # The raw fd, not a buffered reader: a daemon thread blocked in a buffered read holds its
        # lock, and the interpreter aborts at shutdown (a SIGTERM while the client is quiet).
        self._fd = (input if input is not None else sys.stdin.buffer).fileno()
        self._chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._pending = bytearray()
        self._scanned = 0  # bytes of _pending known to hold no newline (long lines stay linear)
        self._eof = False
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._closed = False
        self._batch: list[bytes] | None = None
        self._batched = 0
        # A thread, not connect_read_pipe: stdin may be a regular file or a terminal as well.
        threading.Thread(target=self._read, name="dsh-acp-stdin", daemon=True).start()

    def _read(self) -> None:
        try:
            while chunk := os.read(self._fd, 1 << 16):
                self._loop.call_soon_threadsafe(self._chunks.put_nowait, chunk)
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody reads any more
                self._loop.call_soon_threadsafe(self._chunks.put_nowait, None)

    async def _next_line(self) -> bytes | None:
        while True:
            index = self._pending.find(b"\n", self._scanned)
            if index >= 0:
                line = bytes(self._pending[:index])
                del self._pending[: index + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._pending)
            if self._eof:
                line = bytes(self._pending)
                self._pending.clear()
                self._scanned = 0
                return line or None
            chunk = await self._chunks.get()
            if chunk is None:
                self._eof = True
            else:
                self._pending.extend(chunk)

    async def send(self, message: WireMessage) -> None:
        self.write(message)

    def write(self, message: WireMessage) -> None:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        try:
            data = text.encode() + b"\n"
        except UnicodeEncodeError:  # a lone surrogate: \u-escaped, the line stays valid JSON
            data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        if self._batch is not None:
            self._batch.append(data)
            self._batched += len(data)
            if self._batched >= BATCH_BYTES:
                self.flush()
            return
        self._write(data)

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Collect writes and send them in blocks of about ``BATCH_BYTES`` (a replay: one write
        system call per message was most of its cost); everything is written on exit."""
        self._batch, self._batched = [], 0
        try:
            yield
        finally:
            self.flush()
            self._batch = None

    def flush(self) -> None:
        if self._batch:
            data, self._batch[:], self._batched = b"".join(self._batch), [], 0
            self._write(data)

    def _write(self, data: bytes) -> None:
        with self._lock:
            if self._closed:
                raise ConnectionError("Connection closed")
            try:
                view = memoryview(data)
                while view:  # a pipe may take a long message in pieces
                    written = self._out.write(view)
                    view = view[written or 0 :]
            except (BrokenPipeError, ValueError) as exc:
                self._closed = True
                raise ConnectionError("the client closed its end of the connection") from exc

    async def receive(self) -> WireMessage | None:
        while True:
            line = await self._next_line()
            if line is None:
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = decode(line)
            except _Unreadable as exc:
                self._error(-32700, f"Parse error: {exc}")
                continue
            problem = _shape_problem(message) or _content_problem(message)
            if problem is not None:
                self._error(-32600, f"Invalid Request: {problem}", message.get("id") if isinstance(message, dict) else None)
                continue
            assert isinstance(message, dict)
            return dict(message)

    def _error(self, code: int, text: str, request_id: object = None) -> None:
        if not _usable_id(request_id) or (isinstance(request_id, str) and _SURROGATE.search(request_id)):
            request_id = None
        with contextlib.suppress(ConnectionError):
            self.write({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}})

    async def close(self) -> None:
        with self._lock:
            self._closed = True


class _Unreadable(ValueError):
    """A line that is not JSON this process can take (the text is the reason)."""


def _no_constant(name: str) -> object:
    raise _Unreadable(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Unreadable(f"the number {text[:40]} is out of range")
    return value


def decode(line: bytes | str) -> object:
    """One line's JSON value; :class:`_Unreadable` (a ``ValueError``) says why it is refused."""
    try:
        return json.loads(line, parse_constant=_no_constant, parse_float=_finite)
    except _Unreadable as exc:
        raise _Unreadable(f"the line is not JSON ({exc})") from None
    except RecursionError:
        raise _Unreadable(f"the line nests arrays or objects deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise _Unreadable(f"the line is not JSON ({exc})") from None


def _content_problem(message: object) -> str | None:
    """Too deep a nesting or a lone surrogate anywhere in the decoded message (keys included)."""
    stack: list[tuple[object, int]] = [(message, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return "a string holds a lone surrogate (an unpaired \\ud800-\\udfff escape); text must be valid Unicode"
        elif isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                return f"the message nests arrays or objects deeper than {MAX_DEPTH} levels"
            if isinstance(value, dict):
                stack.extend((key, depth) for key in value)
                stack.extend((item, depth + 1) for item in value.values())
            else:
                stack.extend((item, depth + 1) for item in value)
    return None


def _usable_id(value: object) -> bool:
    return value is None or (isinstance(value, (str, int, float)) and not isinstance(value, bool))


def _shape_problem(message: object) -> str | None:
    if not isinstance(message, dict):
        return f"expected a JSON object, got {type(message).__name__}"
    if message.get("jsonrpc") != "2.0":
        return 'the "jsonrpc" member must be "2.0"'
    if not _usable_id(message.get("id")):
        return f'the "id" member must be a string, a number or null, got {type(message["id"]).__name__}'
    method = message.get("method")
    if method is not None:
        if not isinstance(method, str):
            return 'the "method" member must be a string'
        params = message.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            return 'the "params" member must be an object or an array'
        return None
    if "id" in message and ("result" in message or "error" in message):
        return None
    return 'a message needs a "method" (request or notification) or an "id" with "result"/"error"'
