"""Waits that return as soon as a condition holds, and fail the test when it never does.

Tests wait on what they expect (an event in the log, a file, a line on a pipe), never for a
fixed time. Polling starts at 1 ms and backs off to 50 ms, so a fast condition costs almost
nothing and a slow one does not spin.
"""

from __future__ import annotations

import asyncio
import os
import select
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import IO, TypeVar

T = TypeVar("T")

_FIRST_POLL = 0.001
_MAX_POLL = 0.05


def _delays(timeout: float, now: Callable[[], float]) -> Iterator[float]:
    """The pauses between polls (1 ms, doubling to 50 ms) until ``timeout`` seconds have passed."""
    deadline = now() + timeout
    poll = _FIRST_POLL
    while now() <= deadline:
        yield poll
        poll = min(poll * 2, _MAX_POLL)


def _timed_out(timeout: float, what: str, check: bool) -> bool:
    if check:
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
    return False


async def wait_until(
    predicate: Callable[[], object], timeout: float = 5.0, what: str = "condition", *, check: bool = True
) -> bool:
    """Poll ``predicate`` on the event loop until it is true (``AssertionError`` after ``timeout``
    seconds; with ``check=False`` a timeout returns ``False``, for the caller's own diagnostics)."""
    for delay in _delays(timeout, asyncio.get_running_loop().time):
        if predicate():
            return True
        await asyncio.sleep(delay)
    return bool(predicate()) or _timed_out(timeout, what, check)


def wait_until_sync(
    predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition", *, check: bool = True
) -> bool:
    """:func:`wait_until` for code outside an event loop (other processes, files, threads)."""
    for delay in _delays(timeout, time.monotonic):
        if predicate():
            return True
        time.sleep(delay)
    return bool(predicate()) or _timed_out(timeout, what, check)


async def retry(
    action: Callable[[], Awaitable[T]], *, on: type[BaseException], timeout: float = 5.0
) -> T:
    """``await action()`` until it stops raising ``on`` (re-raised after ``timeout`` s), e.g. a lock
    a killed process held, released once the kernel or the server notices."""
    for delay in _delays(timeout, asyncio.get_running_loop().time):
        try:
            return await action()
        except on:
            pass
        await asyncio.sleep(delay)
    return await action()


def read_until(
    stream: IO[bytes] | IO[str] | int, done: Callable[[str], bool], timeout: float = 30.0, seen: str = ""
) -> str:
    """Read a pipe (a file object or descriptor) until ``done(text so far)``; returns the text.

    Blocks in ``select`` until the pipe has data, so it returns as soon as the marker arrives.
    ``seen`` is text read earlier (it counts towards ``done``). End of file before ``done`` fails.
    """
    fd = stream if isinstance(stream, int) else stream.fileno()
    deadline = time.monotonic() + timeout
    raw = b""
    text = seen
    while not done(text):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout:g}s; read: {text[-2000:]!r}")
        if not select.select([fd], [], [], left)[0]:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            raise AssertionError(f"the pipe closed; read: {text[-2000:]!r}")
        raw += chunk
        text = seen + raw.decode(errors="replace")
    return text


async def stays(predicate: Callable[[], object], seconds: float = 0.1, what: str = "condition") -> None:
    """Check that ``predicate`` holds throughout ``seconds`` (deliberately a time window: what is
    checked is that nothing happens during it), failing as soon as it breaks."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while True:
        assert predicate(), f"{what} broke within {seconds:g}s"
        if loop.time() >= end:
            return
        await asyncio.sleep(min(_MAX_POLL / 10, end - loop.time()))
