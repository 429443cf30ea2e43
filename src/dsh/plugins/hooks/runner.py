"""Running one hook command, and reading what it said (Claude Code's contract).

A hook is the user's own code: it runs unconfined, as ``/bin/sh -c COMMAND`` in the session's
workspace, in a process group of its own (``start_new_session``), with the event's JSON on
stdin and ``CLAUDE_PROJECT_DIR`` set. Its timeout (default 60 s) and a cancelled turn both kill
the whole group (SIGKILL), so a hook that forks a daemon-like child cannot hold the turn open.
At most :data:`MAX_CAPTURE` bytes of each stream are kept; the rest is read and dropped so a
chatty hook cannot block on a full pipe.

The exit code and stdout mean what Claude Code documents: 0 is success (stdout may be a JSON
object with ``decision``/``reason``, ``continue``, ``hookSpecificOutput.permissionDecision``
``allow|deny|ask``, ``permissionDecisionReason`` and ``additionalContext``; plain stdout is
context for ``UserPromptSubmit`` and ``SessionStart``); 2 blocks, with stderr as the reason;
anything else is a non-blocking error (one warning line).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal as signals
import time
from dataclasses import dataclass
from typing import Any

from dsh.runtime.abort import AbortSignal

__all__ = ["MAX_CAPTURE", "HookOutput", "RunOutcome", "parse_output", "run_command"]

MAX_CAPTURE = 1 << 20
BLOCKING_EXIT = 2


@dataclass(frozen=True)
class RunOutcome:
    exit_code: int | None
    """``None`` when the hook did not exit on its own (timed out, cancelled, failed to start)."""
    stdout: str
    stderr: str
    duration_ms: int
    timed_out: bool = False
    cancelled: bool = False
    error: str | None = None
    """Why the hook could not be started (no such folder...), else ``None``."""


@dataclass(frozen=True)
class HookOutput:
    """What one run decided: ``decision`` is ``allow``/``deny``/``ask``/``block`` or ``None``."""

    decision: str | None = None
    reason: str | None = None
    additional_context: str | None = None
    stop: bool = False


async def _drain(stream: asyncio.StreamReader | None) -> bytes:
    if stream is None:
        return b""
    kept = bytearray()
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return bytes(kept)
        if len(kept) < MAX_CAPTURE:
            kept += chunk[: MAX_CAPTURE - len(kept)]


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signals.SIGKILL)


async def run_command(
    command: str,
    payload: object,
    *,
    cwd: str,
    env: dict[str, str],
    timeout_s: float,
    signal: AbortSignal | None = None,
) -> RunOutcome:
    """Run ``command`` with ``payload`` as JSON on stdin; never raises but on cancellation."""
    started = time.monotonic()

    def elapsed() -> int:
        return int((time.monotonic() - started) * 1000)

    # ASCII escapes: a lone surrogate from the model's arguments stays valid JSON.
    data = (json.dumps(payload) + "\n").encode()
    try:
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", command,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            cwd=cwd, env=env, start_new_session=True,
        )
    except OSError as exc:
        return RunOutcome(None, "", "", elapsed(), error=exc.strerror or str(exc))

    async def feed() -> None:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(data)
            await proc.stdin.drain()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.close()

    async def whole() -> tuple[bytes, bytes]:
        _, out, err, _ = await asyncio.gather(feed(), _drain(proc.stdout), _drain(proc.stderr), proc.wait())
        return out, err

    task = asyncio.ensure_future(whole())
    aborted = asyncio.Event()
    remove = signal.add_listener(aborted.set) if signal is not None else None
    stopper = asyncio.ensure_future(aborted.wait())
    try:
        done, _ = await asyncio.wait({task, stopper}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        _kill_group(proc)
        task.cancel()
        raise
    finally:
        stopper.cancel()
        if remove is not None:
            remove()
    if task in done:
        out, err = task.result()
        # The hook exited; whatever it left running in its group goes with it.
        _kill_group(proc)
        return RunOutcome(proc.returncode, _text(out), _text(err), elapsed())
    _kill_group(proc)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    with contextlib.suppress(Exception):
        await asyncio.wait_for(proc.wait(), 5)
    return RunOutcome(None, "", "", elapsed(), timed_out=task not in done and not aborted.is_set(), cancelled=aborted.is_set())


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _obj(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def parse_output(event: str, run: RunOutcome) -> HookOutput:
    """Claude Code's meaning of a run's exit code and output, for hook event ``event``."""
    out, err = run.stdout.strip(), run.stderr.strip()
    if run.exit_code == BLOCKING_EXIT:
        return HookOutput("block", err or None)
    if run.exit_code != 0:
        return HookOutput()
    parsed = None
    if out.startswith("{"):
        with contextlib.suppress(ValueError, RecursionError):
            parsed = _obj(json.loads(out))
    if parsed is None:
        # Plain stdout is context for the two events that take it (Claude Code's rule).
        context = out if out and event in ("UserPromptSubmit", "SessionStart") else None
        return HookOutput(additional_context=context)
    decision = parsed.get("decision") if parsed.get("decision") in ("approve", "block") else None
    reason = parsed.get("reason") if isinstance(parsed.get("reason"), str) else None
    context = None
    specific = _obj(parsed.get("hookSpecificOutput"))
    if specific is not None and specific.get("hookEventName", event) == event:
        permission = specific.get("permissionDecision")
        if permission in ("allow", "deny", "ask"):
            decision = permission
            why = specific.get("permissionDecisionReason")
            reason = why if isinstance(why, str) else reason
        if isinstance(specific.get("additionalContext"), str):
            context = specific["additionalContext"]
    if decision == "approve":
        decision = "allow"
    return HookOutput(decision, reason, context or None, parsed.get("continue") is False)
