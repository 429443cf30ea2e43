"""Running one ``bash -c`` command as a managed process group, foreground or background.

Output goes to files, not pipes: a command that leaves a background child holding its stdout
cannot hang the call, the full output is already on disk when it has to be spilled, and a
background job's output can be read from any offset. The process group is killed (SIGTERM, then
SIGKILL after ``grace_ms``) on timeout, on cancel and when the command exits, so nothing it started
outlives the call. Under the sandbox, bubblewrap's pid namespace does the same for processes that
left the group.
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

__all__ = ["ManagedProcess", "Outcome", "kill_group", "spawn", "tail_text"]

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
    truncated = begin > start
    text = data.decode("utf-8", errors="replace")
    if truncated and "\n" in text[:200]:
        text = text[text.index("\n") + 1 :]  # start the tail on a whole line
    return text, truncated, end


@dataclass
class Outcome:
    exit_code: int | None
    signal: str | None
    timed_out: bool
    aborted: bool


class ManagedProcess:
    """A spawned command: its process, output files, and how to stop it."""

    def __init__(self, proc: asyncio.subprocess.Process, stdout: Path, stderr: Path, grace_ms: int) -> None:
        self.proc = proc
        self.stdout = stdout
        self.stderr = stderr
        self.grace_ms = grace_ms

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
            return self.outcome(timed_out=timed_out, aborted=aborted)
        except BaseException:
            # Cancelled (the loop gave up on this step): kill now, synchronously.
            kill_group(self.proc.pid, signals.SIGKILL)
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
    stdout: Path,
    stderr: Path | None,
    grace_ms: int,
) -> ManagedProcess:
    """Start ``argv`` in a new session (its own process group) with output to files;
    ``stderr=None`` merges it into ``stdout`` (background jobs)."""
    with stdout.open("wb") as out:
        err = stderr.open("wb") if stderr is not None else None
        try:
            proc = await asyncio.create_subprocess_exec(
                *die_with_parent(argv),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err if err is not None else asyncio.subprocess.STDOUT,
                cwd=str(cwd),
                env=env,
                start_new_session=True,
            )
        finally:
            if err is not None:
                err.close()
    return ManagedProcess(proc, stdout, stderr if stderr is not None else stdout, grace_ms)
