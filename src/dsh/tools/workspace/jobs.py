"""Background jobs: ``bash`` with ``run_in_background``, read with ``job_output``, listed with
``job_list`` and stopped with ``job_kill``. Other producers (a background ``subagent``) add
final-output jobs through :meth:`JobManager.start_task` (the manager is the ``JOBS`` service).

Jobs belong to the session that started them (another session cannot see them) and live as long
as this process: disposing the plugin kills every running job, and a job of an earlier process of
the same session (found by its ``job_id: <id>`` line in the log) is reported as ``lost``, never as
running. ``job_output`` returns the output since the previous read, cut to its tail when large
(past the spill cap, the note says what was kept on disk), and always ends with ``[status: ...]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from dsh import _clock
from dsh.runtime.keys import ServiceKey
from dsh.tools.types import Tool, ToolCall, ToolError, define_tool
from dsh.tools.workspace._common import bool_arg, number_arg, session_id, str_arg, text
from dsh.tools.workspace.process import ManagedProcess, Outcome, spawn, tail_bytes, tail_text
from dsh.tools.workspace.spill import Capture, SpillStore

__all__ = ["JOBS", "Job", "JobManager", "TaskWork", "job_tools"]

_JOB_LINE: Final = re.compile(r"^job_id: (\S+)$", re.MULTILINE)
_ID_DESC: Final = "Job id returned by the tool that started the background work."


@dataclass
class TaskWork:
    """A final-output job's work: ``done`` settles to ``(status, output)``; ``cancel`` stops it."""

    done: asyncio.Future[tuple[str, str]]
    cancel: Callable[[str], None]
    kind: str


@dataclass
class Job:
    id: str
    owner: str
    command: str
    process: ManagedProcess | None
    started_ms: int
    task: TaskWork | None = None
    result: str = ""
    status: str = "running"  # running | completed | failed | killed
    outcome: Outcome | None = None
    offset: int = 0
    kill_reason: str | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    watcher: asyncio.Task[None] | None = None

    def status_line(self) -> str:
        if self.status in ("running", "killed"):
            return f"[status: {self.status}]"
        detail = ""
        if self.outcome is not None and self.outcome.exit_code is not None:
            detail = f", exit code: {self.outcome.exit_code}"
        elif self.outcome is not None and self.outcome.signal is not None:
            detail = f", signal: {self.outcome.signal}"
        return f"[status: {self.status}{detail}]"


class JobManager:
    """The process-local job registry."""

    def __init__(self, spill: SpillStore, *, grace_ms: int, max_output_bytes: int) -> None:
        self.spill = spill
        self.grace_ms = grace_ms
        self.max_output_bytes = max_output_bytes
        self._jobs: dict[str, Job] = {}

    async def start(self, call: ToolCall, command: str, argv: list[str], workdir: Path, env: dict[str, str]) -> Job:
        owner = session_id(call)
        # ``bash-N`` as in the reference, numbered past every id this session ever announced
        # (in this process or an earlier one), so a lost job's id is never reused.
        used = [job.id for job in self.owned(owner)] + _earlier_jobs(call)
        numbers = [int(i[5:]) for i in used if i.startswith("bash-") and i[5:].isdigit()]
        job_id = f"bash-{max(numbers, default=0) + 1}"
        output = Capture(self.spill.path_for(owner, job_id), self.spill.budget(owner), self.max_output_bytes)
        process = await spawn(argv, cwd=workdir, env=env, stdout=output, stderr=None, grace_ms=self.grace_ms)
        job = Job(job_id, owner, command, process, _clock.now_ms())
        job.watcher = asyncio.get_running_loop().create_task(self._watch(job))
        self._jobs[job_id] = job
        return job

    def start_task(self, owner: str, prefix: str, label: str, work: TaskWork) -> Job:
        """Register a final-output job ``<prefix>-N`` of session ``owner``; it settles when
        ``work.done`` does, and ``job_output`` then returns its output once."""
        used = [job.id for job in self.owned(owner)]
        numbers = [int(i[len(prefix) + 1 :]) for i in used if i.startswith(prefix + "-") and i[len(prefix) + 1 :].isdigit()]
        job = Job(f"{prefix}-{max(numbers, default=0) + 1}", owner, label, None, _clock.now_ms(), task=work)
        job.watcher = asyncio.get_running_loop().create_task(self._watch_task(job, work))
        self._jobs[job.id] = job
        return job

    async def _watch_task(self, job: Job, work: TaskWork) -> None:
        try:
            status, output = await asyncio.shield(work.done)
        except Exception as exc:
            status, output = "failed", str(exc)
        finally:
            job.done.set()
        job.result = output
        if job.status == "running":
            job.status = status

    async def _watch(self, job: Job) -> None:
        assert job.process is not None
        try:
            outcome = await job.process.wait(None, None)
        finally:
            job.done.set()
        job.outcome = outcome
        if job.status == "running":
            job.status = "completed" if outcome.exit_code == 0 else ("killed" if outcome.signal else "failed")

    def owned(self, owner: str) -> list[Job]:
        return [job for job in self._jobs.values() if job.owner == owner]

    def get(self, job_id: str, owner: str) -> Job | None:
        job = self._jobs.get(job_id)
        return job if job is not None and job.owner == owner else None

    def read(self, job: Job) -> str:
        if job.process is None:
            chunk, job.result = job.result, ""
            return chunk
        capture = job.process.stdout_capture
        if not capture.overflowed:
            chunk, truncated, end = tail_text(capture.path, self.max_output_bytes, job.offset)
            job.offset = end
            if truncated:
                chunk = f"[earlier output omitted; full output: {capture.path}]\n" + chunk
            return chunk
        # Past the spill cap: the file holds the head, memory the last bytes.
        tail, new = capture.tail(), capture.total - job.offset
        job.offset = capture.total
        if new <= len(tail):
            return tail_bytes(tail[len(tail) - new :], False)
        where = capture.path if capture.kept else None
        note = self.spill.note(capture.kept, capture.total, where)
        return f"[earlier output omitted; {note}]\n" + tail_bytes(tail, True)

    async def kill(self, job: Job, reason: str | None) -> None:
        if job.status != "running":
            return
        job.status = "killed"
        job.kill_reason = reason
        if job.task is not None:
            job.task.cancel(reason or "background job killed")
        if job.process is not None:
            await job.process.stop()

    async def dispose(self) -> None:
        """Kill every running job (jobs do not outlive the process that started them)."""
        for job in list(self._jobs.values()):
            if job.status == "running":
                with contextlib.suppress(Exception):
                    await self.kill(job, "the session's process is shutting down")
            if job.watcher is not None:
                job.watcher.cancel()
        self._jobs.clear()


JOBS: ServiceKey[JobManager] = ServiceKey("jobs")
"""The background job registry of the workspace tools (``ctx.get(JOBS)``)."""


def _earlier_jobs(call: ToolCall) -> list[str]:
    """Job ids announced in this session's log (by any process)."""
    session = getattr(call.agent, "session", None)
    found: list[str] = []
    for event in getattr(session, "events", ()):
        if event.type != "tool/result":
            continue
        for block in event.data.get("content") or ():
            if isinstance(block, dict) and block.get("type") == "text":
                found.extend(_JOB_LINE.findall(str(block.get("text", ""))))
    return list(dict.fromkeys(found))


def _lost(job_id: str) -> str:
    return (
        f"job {job_id} was started by an earlier process of this session and did not survive it; "
        "its output is gone\n[status: lost]"
    )


def job_tools(jobs: JobManager, *, wait_ms: int, max_wait_ms: int) -> Iterable[Tool]:
    def find(job_id: str, call: ToolCall) -> Job | None:
        """The caller's live job, ``None`` for one an earlier process of the session ran (lost),
        or a :class:`ToolError` for an id the session never had."""
        job = jobs.get(job_id, session_id(call))
        if job is None and job_id not in _earlier_jobs(call):
            raise ToolError(f'unknown job "{job_id}" (job_list shows your jobs)')
        return job

    async def job_output(args: Any, call: ToolCall) -> list[Any]:
        job_id = str_arg(args, "job_id", allow_empty=False)
        wait = bool_arg(args, "wait")
        timeout = number_arg(args, "timeout_ms", minimum=0)
        assert job_id is not None
        job = find(job_id, call)
        if job is None:
            return text(_lost(job_id))
        if wait and job.status == "running":
            limit = min(timeout if timeout is not None else wait_ms, max_wait_ms) / 1000
            waiter = asyncio.ensure_future(job.done.wait())
            aborter = asyncio.ensure_future(call.signal.wait())
            try:
                await asyncio.wait({waiter, aborter}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
                aborter.cancel()
            if job.done.is_set() and job.watcher is not None:
                await asyncio.shield(job.watcher)
        output = jobs.read(job)
        body = output if not output or output.endswith("\n") else output + "\n"
        return text(f"{body}{job.status_line()}")

    def job_list(args: Any, call: ToolCall) -> list[Any]:
        owner = session_id(call)
        live = jobs.owned(owner)
        lines = [
            f"{job.id}  {job.task.kind if job.task else 'bash'}  {job.status_line()[1:-1]}  {job.command[:80]}"
            for job in live
        ]
        known = {job.id for job in live}
        lines += [f"{jid}  bash  status: lost" for jid in _earlier_jobs(call) if jid not in known]
        return text("\n".join(lines) if lines else "(no background jobs)")

    async def job_kill(args: Any, call: ToolCall) -> list[Any]:
        job_id = str_arg(args, "job_id", allow_empty=False)
        reason = str_arg(args, "reason", required=False)
        assert job_id is not None
        job = find(job_id, call)
        if job is None:
            return text(_lost(job_id))
        if job.status != "running":
            return text(f"job {job_id} already finished\n{job.status_line()}")
        await jobs.kill(job, reason)
        return text(f"job {job_id} killed\n{job.status_line()}")

    id_prop = {"type": "string", "description": _ID_DESC}
    yield define_tool(
        name="job_output",
        description=(
            "Read a background job. Stream jobs return only output since the previous read; "
            "final-output jobs return their result after settlement. Every response ends with "
            "`[status: ...]`. Reads are non-blocking unless `wait: true`, which waits up to the "
            "configured cap."
        ),
        parameters={
            "type": "object",
            "properties": {
                "job_id": id_prop,
                "wait": {
                    "type": "boolean",
                    "description": "Block until the job reaches a terminal status or the timeout expires. A timed-out wait returns [status: running] and leaves the job alive.",
                },
                "timeout_ms": {
                    "type": "number",
                    "description": "Max wait in milliseconds (only meaningful with wait: true). Defaults to the configured wait timeout; capped by the configured maximum.",
                },
            },
            "required": ["job_id"],
        },
        execute=job_output,
    )
    yield define_tool(
        name="job_list",
        description="List your background jobs (running and finished) with their ids, kinds, and statuses.",
        parameters={"type": "object", "properties": {}},
        execute=job_list,
    )
    yield define_tool(
        name="job_kill",
        description=(
            "Request cancellation of a running background job by job id. Returns immediately; "
            "the job settles as killed once its work actually stops."
        ),
        parameters={
            "type": "object",
            "properties": {
                "job_id": id_prop,
                "reason": {
                    "type": "string",
                    "description": "Optional short reason, recorded in the log and forwarded to the job.",
                },
            },
            "required": ["job_id"],
        },
        execute=job_kill,
    )
