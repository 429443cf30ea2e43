"""Run state: what the agent loop keeps per agent (not durable).

Owns :class:`RunState`: the prompt and steering queues, the status and its waiters, the cancel
marker, the open step's abort controller, the driver task, and the per-instance request state
(whether the first request was sent, the session prefix, the latest logged header). The
:class:`~dsh.agent.agent.Agent` handle reads and feeds it; only the loop drives it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dsh.agent.hooks import AGENT_STATUS, AgentStatus
from dsh.runtime import AbortController, Context
from dsh.session.vocab import ContentBlock, JsonObject

if TYPE_CHECKING:
    from dsh.agent.agent import Agent
    from dsh.agent.invariant import ShadowFold
    from dsh.agent.loop import AgentLoop

Status = Literal["idle", "running", "disposed"]


@dataclass(frozen=True)
class QueuedMessage:
    """A prompt or steering message, snapshotted when queued."""

    content: list[ContentBlock]
    source: JsonObject


class RunState:
    """One agent's loop-side state; see the module docstring."""

    def __init__(self, agent: Agent, ctx: Context) -> None:
        self._agent = agent
        self._ctx = ctx
        self.status: Status = "idle"
        self.queued: deque[QueuedMessage] = deque()
        self.steering: deque[QueuedMessage] = deque()
        self.cancel_reason: str | None = None
        self.step_controller: AbortController | None = None
        self.driver: asyncio.Task[None] | None = None
        self.step_task: asyncio.Task[object] | None = None
        self.in_tool = False
        self.loop: AgentLoop | None = None
        # Request state of this loop instance: the latest logged header is found by one backward
        # scan when the instance starts, then kept current as headers are logged.
        self.first_request = True
        self.prefix: list[JsonObject] | None = None
        self.last_header: JsonObject | None = None
        self.last_header_key: tuple[object, ...] | None = None
        self.shadow: ShadowFold | None = None
        self._wakeup = asyncio.Event()
        self._idle_waiters: list[asyncio.Future[None]] = []
        # Strong references to background work (asyncio keeps only weak ones).
        self._background: set[asyncio.Task[None]] = set()

    # -- queues --------------------------------------------------------------------------------

    def enqueue(self, message: QueuedMessage) -> None:
        self.queued.append(message)
        self._wakeup.set()

    def cancel(self, reason: str | None) -> None:
        has_work = self.status == "running" or self.step_controller is not None or self.queued or self.steering
        if not has_work or self.status == "disposed":
            return
        self.cancel_reason = reason if reason is not None else "cancelled"
        self.queued.clear()
        self.steering.clear()
        if self.step_controller is not None:
            self.step_controller.abort(self.cancel_reason)
        self._wakeup.set()

    async def wait_for_work(self) -> None:
        await self._wakeup.wait()
        self._wakeup.clear()

    # -- status --------------------------------------------------------------------------------

    def set_status(self, status: Status) -> None:
        if status == self.status or self.status == "disposed":
            return
        self.status = status
        self._ctx.emit(AGENT_STATUS, AgentStatus(self._agent, status))
        if status != "running":
            self.settle_idle()

    def mark_disposed(self) -> None:
        if self.status != "disposed":
            self.status = "disposed"
            self._ctx.emit(AGENT_STATUS, AgentStatus(self._agent, "disposed"))
        self._wakeup.set()

    def settle_idle(self) -> None:
        waiters, self._idle_waiters = self._idle_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def when_idle(self) -> None:
        if self.status == "disposed":
            if self.driver is not None and not self.driver.done():
                await asyncio.shield(self.driver)
            return
        if self.status != "running" and not self.queued:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._idle_waiters.append(future)
        await future

    def spawn(self, work: Coroutine[object, object, None]) -> None:
        """Run ``work`` in the background, keeping a strong reference until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
