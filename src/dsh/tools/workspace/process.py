"""Running one ``bash -c`` command as a managed process group, foreground or background.

Output goes through a pipe that dsh reads into a :class:`~.spill.Capture` (a file in the spill
folder, capped by the spill budget, plus the last bytes in memory): the full output, up to the
cap, is already on disk when it has to be spilled, a background job's output can be read from
any offset, and a command printing gigabytes cannot fill the disk. The process group is killed
(SIGTERM, then SIGKILL after ``grace_ms``) on timeout, on cancel and when the command exits, so
nothing it started outlives the call; under the sandbox, bubblewrap's pid namespace does the same
for processes that left the group. A process that escaped both (an unconfined ``setsid`` child)
and still holds the pipe cannot hang the call either: after the command is gone its output is
read for at most :data:`DRAIN_SECONDS` more.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal as signals
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dsh.runtime.abort import AbortSignal
from dsh.tools.workspace.spill import Capture

__all__ = ["DRAIN_SECONDS", "ManagedProcess", "Outcome", "kill_group", "spawn", "tail_bytes", "tail_text"]

DRAIN_SECONDS: Final = 0.5

ENV_OVERRIDES: Final = {"NO_COLOR": "1", "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat"}

_SETPRIV: Final = shutil.which("setpriv")


def die_with_parent(argv: list[str]) -> list[str]:
    """``argv`` set up to get SIGKILL if dsh itself dies (``setpriv --pdeathsig``, which
    survives the exec). Not a ``preexec_fn``: that would force ``fork`` over ``vfork`` and cost
    ~20 ms per spawn. Bubblewrap's ``--die-with-parent`` covers sandboxed commands already."""
    if _SETPRIV is None or (argv and Path(argv[0]).name == "bwrap"):
        return argv
    return [_SETPRIV, "--pdeathsig", "KILL", "--", *argv]


def kill_group(pid: int, sig: int = signals.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def tail_text(path: Path, max_bytes: int, start: int = 0) -> tuple[str, bool, int]:
    """The text of ``path`` from byte ``start``, cut to its last ``max_bytes``; returns
    ``(text, truncated, end_offset)``."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            end = fh.tell()
            begin = max(start, end - max_bytes)
            fh.seek(begin)
            data = fh.read(end - begin)
    except FileNotFoundError:
        return "", False, start
    return tail_bytes(data, begin > start), begin > start, end


def tail_bytes(data: bytes, truncated: bool) -> str:
    """The text of a (possibly cut) tail; a cut one starts on a whole line."""
    text = data.decode("utf-8", errors="replace")
    if truncated and "\n" in text[:200]:
        text = text[text.index("\n") + 1 :]
    return text


@dataclass
class Outcome:
    exit_code: int | None
    signal: str | None
    timed_out: bool
    aborted: bool


class _Reader(asyncio.Protocol):
    """Feeds one pipe into its capture."""

    def __init__(self, capture: Capture, done: asyncio.Future[None]) -> None:
        self.capture = capture
        self.done = done

    def data_received(self, data: bytes) -> None:
        self.capture.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


class ManagedProcess:
    """A spawned command: its process, output captures, and how to stop it."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        captures: list[Capture],
        readers: list[tuple[asyncio.BaseTransport, asyncio.Future[None]]],
        grace_ms: int,
    ) -> None:
        self.proc = proc
        self.captures = captures
        self.stdout_capture = captures[0]
        self.stderr_capture = captures[-1]
        self.stdout = captures[0].path
        self.stderr = captures[-1].path
        self.grace_ms = grace_ms
        self._readers = readers

    async def drain(self) -> None:
        """Read what is left in the pipes (at most :data:`DRAIN_SECONDS`), then close them."""
        pending = [done for _, done in self._readers if not done.done()]
        if pending:
            await asyncio.wait(pending, timeout=DRAIN_SECONDS)
        self.close_pipes()

    def close_pipes(self) -> None:
        for transport, _ in self._readers:
            transport.close()
        for capture in self.captures:
            capture.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def stop(self) -> None:
        """SIGTERM the group, then SIGKILL after the grace period."""
        if self.proc.returncode is None:
            kill_group(self.proc.pid, signals.SIGTERM)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.grace_ms / 1000):
                    await self.proc.wait()
        kill_group(self.proc.pid, signals.SIGKILL)
        if self.proc.returncode is None:
            await self.proc.wait()

    def outcome(self, *, timed_out: bool = False, aborted: bool = False) -> Outcome:
        code = self.proc.returncode
        if code is not None and code < 0:
            try:
                name = signals.Signals(-code).name
            except ValueError:
                name = str(-code)
            return Outcome(None, name, timed_out, aborted)
        return Outcome(code, None, timed_out, aborted)

    async def wait(self, timeout_ms: float | None, signal: AbortSignal | None) -> Outcome:
        """Wait for exit, the timeout or an abort; the group is gone when this returns."""
        waiter = asyncio.ensure_future(self.proc.wait())
        aborter = asyncio.ensure_future(signal.wait()) if signal is not None else None
        pending: set[asyncio.Future[object]] = {waiter}  # type: ignore[arg-type]
        if aborter is not None:
            pending.add(aborter)  # type: ignore[arg-type]
        try:
            done, _ = await asyncio.wait(
                pending,
                timeout=None if timeout_ms is None else timeout_ms / 1000,
                return_when=asyncio.FIRST_COMPLETED,
            )
            timed_out = not done
            aborted = aborter is not None and aborter in done and waiter not in done
            await self.stop()
            await self.drain()
            return self.outcome(timed_out=timed_out, aborted=aborted)
        except BaseException:
            # Cancelled (the loop gave up on this step): kill now, synchronously.
            kill_group(self.proc.pid, signals.SIGKILL)
            self.close_pipes()
            raise
        finally:
            if aborter is not None:
                aborter.cancel()
            if not waiter.done():
                waiter.cancel()


async def spawn(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stdout: Capture,
    stderr: Capture | None,
    grace_ms: int,
) -> ManagedProcess:
    """Start ``argv`` in a new session (its own process group) with its output read into the
    captures; ``stderr=None`` merges it into ``stdout`` (background jobs)."""
    loop = asyncio.get_running_loop()
    captures = [stdout] if stderr is None else [stdout, stderr]
    pipes = [os.pipe() for _ in captures]
    try:
        proc = await asyncio.create_subprocess_exec(
            *die_with_parent(argv),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=pipes[0][1],
            stderr=pipes[-1][1],
            cwd=str(cwd),
            env=env,
            start_new_session=True,
        )
    except BaseException:
        for read_fd, write_fd in pipes:
            os.close(read_fd)
            os.close(write_fd)
        for capture in captures:
            capture.close()
        raise
    for _, write_fd in pipes:
        os.close(write_fd)  # the child holds its copy; EOF comes when every writer is gone
    readers: list[tuple[asyncio.BaseTransport, asyncio.Future[None]]] = []
    try:
        for (read_fd, _), capture in zip(pipes, captures, strict=True):
            done: asyncio.Future[None] = loop.create_future()
            pipe = os.fdopen(read_fd, "rb", buffering=0)
            transport, _ = await loop.connect_read_pipe(lambda c=capture, d=done: _Reader(c, d), pipe)  # type: ignore[misc]
            readers.append((transport, done))
    except BaseException:
        # Cancelled while the command already runs: it must not outlive the call.
        kill_group(proc.pid, signals.SIGKILL)
        for opened, _ in readers:
            opened.close()
        for read_fd, _ in pipes[len(readers) :]:
            with contextlib.suppress(OSError):
                os.close(read_fd)
        for capture in captures:
            capture.close()
        raise
    return ManagedProcess(proc, captures, readers, grace_ms)
