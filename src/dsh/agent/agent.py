"""Agents and the agent registry (``ctx.agents``).

Owns :class:`Agent` (its queues, status, cancel marker and the ``send``/``steer``/``inject``/
``cancel``/``when_idle`` surface described in docs/agent-loop.md) and :class:`AgentRegistry`. The driver that
turns queued prompts into turns lives in :mod:`dsh.agent.loop`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dsh import _json
from dsh.runtime import AbortController, Context, ServiceKey
from dsh.session import Session

log = logging.getLogger("dsh.agent")

Status = Literal["idle", "running", "disposed"]
Content = Sequence[Mapping[str, Any]]
USER_SOURCE: dict[str, Any] = {"kind": "user"}

name = "agents"


class AgentDisposedError(RuntimeError):
    code = "DISPOSED"


@dataclass(frozen=True)
class QueuedMessage:
    content: list[dict[str, Any]]
    source: dict[str, Any]


@dataclass
class AgentOptions:
    model: str | None = None


def _snapshot_message(content: Content, source: Mapping[str, Any] | None) -> QueuedMessage:
    try:
        snap_content = _json.snapshot(list(content))[0]
        snap_source = _json.snapshot(dict(source) if source is not None else USER_SOURCE)[0]
    except (_json.NotLosslessJSON, TypeError):
        raise TypeError("agent message content and source must be losslessly JSON-serializable") from None
    return QueuedMessage(snap_content, snap_source)


class Agent:
    """One agent on one live session. Its driver task is started by the agent loop."""

    def __init__(self, ctx: Context, id: str, session: Session, options: AgentOptions) -> None:
        self.id = id
        self.session = session
        self.options = options
        self.ctx = ctx.scoped(self)
        self._root = ctx
        self._status: Status = "idle"
        self.queued: deque[QueuedMessage] = deque()
        self.steering: deque[QueuedMessage] = deque()
        self.cancel_reason: str | None = None
        self.step_controller: AbortController | None = None
        self.seen_running = False
        self._wakeup = asyncio.Event()
        self._idle_waiters: list[asyncio.Future[None]] = []
        self.driver: asyncio.Task[None] | None = None
        self.on_inject_flush: Callable[[], Awaitable[None]] | None = None
        self.on_dispose: Callable[[], Awaitable[None]] | None = None
        # Strong references to background flushes (asyncio keeps only weak ones).
        self._background: set[asyncio.Task[None]] = set()

    # -- public surface ----------------------------------------------------------------------

    @property
    def status(self) -> Status:
        return self._status

    @property
    def disposed(self) -> bool:
        return self._status == "disposed"

    def send(self, content: Content, *, source: Mapping[str, Any] | None = None) -> None:
        """Queue a prompt; the driver turns every queued batch into one turn."""
        self._check_live()
        message = _snapshot_message(content, source)
        self.queued.append(message)
        self._wakeup.set()
        self._root.emit("agent/queued", self, message.content, {"source": message.source, "steering": False})

    def steer(self, content: Content, *, source: Mapping[str, Any] | None = None) -> None:
        """Add guidance to the running turn (as ``steering/message``); like ``send`` when idle."""
        self._check_live()
        if self._status != "running":
            self.send(content, source=source)
            return
        message = _snapshot_message(content, source)
        self.steering.append(message)
        self._root.emit("agent/queued", self, message.content, {"source": message.source, "steering": True})

    def inject(
        self,
        content: Content,
        *,
        source: Mapping[str, Any] | None = None,
        envelope: str | None = None,
        meta: Any = None,
    ) -> None:
        """Append a ``context/message`` now; when no turn is open, in a one-shot turn of its own."""
        self._check_live()
        message = _snapshot_message(content, source)
        data: dict[str, Any] = {"content": message.content, "source": message.source}
        if envelope is not None:
            data["envelope"] = envelope
        if meta is not None:
            data["meta"] = meta
        session = self.session
        if session.open_turn is not None:
            session.append("context/message", data, surface_op="append")
            return
        turn = session.last_turn + 1
        session.append("turn/start", {"turn": turn, "trigger": {"kind": "injection", "source": message.source}})
        session.append("context/message", data, surface_op="append")
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
        if self.on_inject_flush is not None:
            task = asyncio.get_running_loop().create_task(self._flush_after_inject(turn))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def cancel(self, reason: str | None = None) -> None:
        """Abort the current work and drop everything queued; a no-op when idle."""
        has_work = (
            self._status == "running" or self.step_controller is not None or self.queued or self.steering
        )
        if not has_work or self.disposed:
            return
        self.cancel_reason = reason if reason is not None else "cancelled"
        self.queued.clear()
        self.steering.clear()
        if self.step_controller is not None:
            self.step_controller.abort(self.cancel_reason)
        self._wakeup.set()

    async def dispose(self) -> None:
        """Leave the registry: an open turn ends ``disposed``, the session is drained and released."""
        if self.on_dispose is not None:
            await self.on_dispose()
        else:
            self.mark_disposed()

    async def when_idle(self) -> None:
        """Wait until the agent is not running and has nothing queued."""
        if self._status == "disposed":
            if self.driver is not None and not self.driver.done():
                await asyncio.shield(self.driver)
            return
        if self._status != "running" and not self.queued:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._idle_waiters.append(future)
        await future

    # -- driver side -------------------------------------------------------------------------

    def set_status(self, status: Status) -> None:
        if status == self._status or self._status == "disposed":
            return
        self._status = status
        if status == "running":
            self.seen_running = True
        self._root.emit("agent/status", self, status)
        if status != "running":
            self.settle_idle()

    def settle_idle(self) -> None:
        waiters, self._idle_waiters = self._idle_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_for_work(self) -> None:
        await self._wakeup.wait()
        self._wakeup.clear()

    def wake(self) -> None:
        self._wakeup.set()

    def mark_disposed(self) -> None:
        if self._status != "disposed":
            self._status = "disposed"
            self._root.emit("agent/status", self, "disposed")
        self._wakeup.set()

    def _check_live(self) -> None:
        if self._status == "disposed":
            raise AgentDisposedError(f'agent "{self.id}" is disposed')

    async def _flush_after_inject(self, turn: int) -> None:
        assert self.on_inject_flush is not None
        try:
            await self.on_inject_flush()
        except Exception as exc:
            log.warning('agent "%s": session/flush failed at turn %s: %s', self.id, turn, exc)
            self._root.emit("agent/error", self, turn, 0, exc)

    def __repr__(self) -> str:
        return f"Agent({self.id!r}, {self._status})"


class AgentRegistry:
    """The agents of a context, by id. Also the plugin that provides it:
    ``await ctx.plugin(AgentRegistry)`` mounts ``ctx.agents``."""

    name = "agents"

    @staticmethod
    def apply(ctx: Context, config: object = None) -> None:
        ctx.provide(AGENTS, AgentRegistry(ctx))

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._agents: dict[str, Agent] = {}

    def register(self, agent: Agent) -> Callable[[], None]:
        if agent.id in self._agents:
            raise ValueError(f'agent "{agent.id}" is already registered')
        self._agents[agent.id] = agent

        def unregister() -> None:
            if self._agents.get(agent.id) is agent:
                del self._agents[agent.id]
                self._ctx.emit("agent/disposed", agent)

        return unregister

    def get(self, agent_id: str) -> Agent | None:
        return self._agents.get(agent_id)

    def list(self) -> list[Agent]:
        return list(self._agents.values())

    def __iter__(self) -> Any:
        return iter(list(self._agents.values()))

    def __len__(self) -> int:
        return len(self._agents)


AGENTS: ServiceKey[AgentRegistry] = ServiceKey("agents")
"""The agent registry service (``ctx.require(AGENTS)``)."""


def apply(ctx: Context, config: object = None) -> None:
    AgentRegistry.apply(ctx, config)
