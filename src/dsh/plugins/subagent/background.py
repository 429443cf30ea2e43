"""Background delegation: ``run_in_background: true`` starts the child as a final-output job of
the workspace tools' job registry (``JOBS``), collected with ``job_output`` and stopped with
``job_kill`` (the reference's catalog wording), listed by ``job_list`` with kind ``subagent``.

The job settles ``completed`` with the child's final text, ``killed`` when cancelled, and
``failed`` with the ``Error: …`` text otherwise. Without the workspace tools there is no job
registry, and a background call is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from dsh.runtime import AbortController, Context
from dsh.tools.types import ToolError

if TYPE_CHECKING:
    from dsh.agent.agent import Agent
    from dsh.plugins.subagent.definitions import AgentDefinition
    from dsh.plugins.subagent.service import SubagentService

__all__ = ["BackgroundRuns"]

UNAVAILABLE = "background jobs unavailable: mount the workspace tools (workspace-tools) for job_output and job_kill"


class BackgroundRuns:
    """Background children of this process (they end with it, as background commands do)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._tasks: set[asyncio.Task[None]] = set()
        self._controllers: set[AbortController] = set()

    def start(
        self,
        service: SubagentService,
        parent: Agent,
        call_id: str,
        prompt: str,
        label: str,
        definition: AgentDefinition | None,
    ) -> str:
        from dsh.tools.workspace.jobs import JOBS, TaskWork

        jobs = self._ctx.get(JOBS)
        if jobs is None:
            raise ToolError(UNAVAILABLE)
        controller = AbortController()
        done: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            try:
                outcome = await service.run(parent, call_id, prompt, label, definition, controller.signal)
                status = "completed" if outcome.reason == "completed" else (
                    "killed" if controller.signal.aborted else "failed"
                )
                result = (status, outcome.model_text)
            except Exception as exc:
                result = ("killed" if controller.signal.aborted else "failed", f"Error: {exc}")
            if not done.done():
                done.set_result(result)

        work = TaskWork(done, lambda reason: controller.abort(reason), "subagent")
        job = jobs.start_task(parent.session.id, "subagent", label, work)
        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        self._controllers.add(controller)

        def forget(_task: object) -> None:
            self._tasks.discard(task)
            self._controllers.discard(controller)

        task.add_done_callback(forget)
        return job.id

    async def dispose(self) -> None:
        for controller in list(self._controllers):
            controller.abort("the session's process is shutting down")
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)
