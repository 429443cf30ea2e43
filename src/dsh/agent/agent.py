"""Agents and the agent registry (``AGENTS``).

Owns :class:`Agent`, a plain handle: its ``send``/``steer``/``inject``/``cancel``/``when_idle``
surface (docs/agent-loop.md) feeds the loop-owned :class:`RunState`; the driver that turns queued
prompts into turns lives in :mod:`dsh.agent.loop`. Also owns :class:`AgentRegistry`, the bus
events an agent dispatches itself, and :func:`side_turn`/:func:`flush_turn` (turns written
outside the driver). Nothing here imports :mod:`dsh.agent.hooks`, which refers to :class:`Agent`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from dsh import _json
from dsh.agent.sessions import SESSIONS
from dsh.agent.turns import reason_for
from dsh.runtime import AbortController, Context, Hook, ServiceKey
from dsh.session import Session
from dsh.session.vocab import (
    COMPLETED,
    ContentBlock,
    ContextMessageData,
    JsonObject,
    Source,
    TurnEndReason,
    turn_end,
    turn_start,
)

if TYPE_CHECKING:
    from dsh.agent.invariant import ShadowFold

__all__ = [
    "AGENTS",
    "AGENT_DISPOSED",
    "AGENT_ERROR",
    "AGENT_QUEUED",
    "AGENT_STATUS",
    "Agent",
    "AgentDisposedError",
    "AgentOptions",
    "AgentRegistry",
    "QueuedMessage",
    "RunState",
    "Status",
    "flush_turn",
    "side_turn",
]

log = logging.getLogger("dsh.agent")
Status = Literal["idle", "running", "disposed"]

Content = Sequence[Mapping[str, object]]
USER_SOURCE: JsonObject = {"kind": "user"}

name = "agents"


@dataclass(frozen=True)
class QueuedMessage:
    """A prompt or steering message, snapshotted when queued."""

    content: list[ContentBlock]
    source: JsonObject


class RunState:
    """What the agent loop keeps per agent (not durable): the prompt and steering queues, the
    status and its waiters, the cancel marker, the open step's abort controller, the driver task,
    and the request state of this loop instance (first request sent, session prefix, the latest
    logged header, found by one backward scan at start and then kept current). The
    :class:`Agent` handle reads and feeds it; only the loop drives it."""

    def __init__(self, agent: Agent, ctx: Context) -> None:
        self._agent = agent
        self._ctx = ctx
        self.status: Status = "idle"
        self.queued: deque[QueuedMessage] = deque()
        self.steering: deque[QueuedMessage] = deque()
        self.cancel_reason: str | None = None
        self.step_controller: AbortController | None = None
        self.driver: asyncio.Task[None] | None = None
        self.step_task: object = None  # the running step's task; compared by identity only
        self.in_tool = False
        self.loop: _Disposer | None = None
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


class _Disposer(Protocol):
    """The loop, as the agent handle sees it."""

    def dispose_agent(self, agent: Agent) -> Awaitable[None]: ...


class AgentDisposedError(RuntimeError):
    code = "DISPOSED"


@dataclass
class AgentOptions:
    model: str | None = None
    # A delegated child's own system prompt (replaces the rendered sections) and tool filter
    # (only these tool names; ``None``: every tool); ``label`` names it to the person.
    system: str | None = None
    tools: frozenset[str] | None = None
    label: str | None = None
    # (the delegating parent agent, its tool call id): where a child's questions are shown.
    delegated_by: tuple[Any, str] | None = None


def _snapshot_message(content: Content, source: Mapping[str, object] | None) -> QueuedMessage:
    try:
        snap_content = _json.lossless_copy(list(content))
        snap_source = _json.lossless_copy(dict(source) if source is not None else USER_SOURCE)
    except (_json.NotLosslessJSON, TypeError):
        raise TypeError("agent message content and source must be losslessly JSON-serializable") from None
    return QueuedMessage(snap_content, snap_source)


class Agent:
    """One agent on one live session: a handle over the loop's run state."""

    def __init__(self, ctx: Context, id: str, session: Session, options: AgentOptions) -> None:
        self.id = id
        self.session = session
        self.options = options
        self.ctx = ctx.scoped(self)
        self._root = ctx
        self.run_state = RunState(self, ctx)

    # -- read-only views of the run state ------------------------------------------------------

    @property
    def status(self) -> Status:
        return self.run_state.status

    @property
    def disposed(self) -> bool:
        return self.run_state.status == "disposed"

    @property
    def queued(self) -> deque[QueuedMessage]:
        return self.run_state.queued

    @property
    def steering(self) -> deque[QueuedMessage]:
        return self.run_state.steering

    @property
    def cancel_reason(self) -> str | None:
        return self.run_state.cancel_reason

    @property
    def last_request_header(self) -> JsonObject | None:
        """The ``header`` of the session's latest ``request/header`` (found once on resume, then
        kept current by every step), or ``None`` before the first request."""
        return self.run_state.last_header

    @property
    def driver(self) -> asyncio.Task[None] | None:
        """The driver task (``None`` before the loop starts it)."""
        return self.run_state.driver

    # -- public surface ----------------------------------------------------------------------

    def send(self, content: Content, *, source: Mapping[str, object] | None = None) -> None:
        """Queue a prompt; the driver turns every queued batch into one turn."""
        self._check_live()
        message = _snapshot_message(content, source)
        self.run_state.enqueue(message)
        self._root.emit(AGENT_QUEUED, AgentQueued(self, message.content, {"source": message.source, "steering": False}))

    def steer(self, content: Content, *, source: Mapping[str, object] | None = None) -> None:
        """Add guidance to the running turn (as ``steering/message``); like ``send`` when idle."""
        self._check_live()
        if self.run_state.status != "running":
            self.send(content, source=source)
            return
        message = _snapshot_message(content, source)
        self.run_state.steering.append(message)
        self._root.emit(AGENT_QUEUED, AgentQueued(self, message.content, {"source": message.source, "steering": True}))

    def inject(
        self,
        content: Content,
        *,
        source: Mapping[str, object] | None = None,
        envelope: str | None = None,
        meta: object = None,
    ) -> None:
        """Append a ``context/message`` now; when no turn is open, in a one-shot turn of its own."""
        self._check_live()
        message = _snapshot_message(content, source)
        data: ContextMessageData = {"content": message.content, "source": message.source}
        if envelope is not None:
            data["envelope"] = envelope
        if meta is not None:
            data["meta"] = meta
        session = self.session
        if session.open_turn is not None:
            session.append("context/message", data, surface_op="append")
            return

        def body(turn: int) -> TurnEndReason:
            session.append("context/message", data, surface_op="append")
            return COMPLETED

        turn = side_turn(session, message.source, body)
        if self.run_state.loop is not None:
            self.run_state.spawn(flush_turn(self._root, self, turn))

    def cancel(self, reason: str | None = None) -> None:
        """Abort the current work and drop everything queued; a no-op when idle."""
        self.run_state.cancel(reason)

    async def dispose(self) -> None:
        """Leave the registry: an open turn ends ``disposed``, the session is drained and released."""
        loop = self.run_state.loop
        if loop is not None:
            await loop.dispose_agent(self)
        else:
            self.run_state.mark_disposed()

    async def when_idle(self) -> None:
        """Wait until the agent is not running and has nothing queued."""
        await self.run_state.when_idle()

    def _check_live(self) -> None:
        if self.run_state.status == "disposed":
            raise AgentDisposedError(f'agent "{self.id}" is disposed')

    def __repr__(self) -> str:
        return f"Agent({self.id!r}, {self.run_state.status})"


class AgentRegistry:
    """The agents of a context, by id. Also the plugin that provides it:
    ``await ctx.plugin(AgentRegistry)`` provides it as ``AGENTS``."""

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
                self._ctx.emit(AGENT_DISPOSED, AgentOnly(agent))

        return unregister

    def get(self, agent_id: str) -> Agent | None:
        return self._agents.get(agent_id)

    def list(self) -> list[Agent]:
        return list(self._agents.values())

    def __iter__(self) -> Iterator[Agent]:
        return iter(list(self._agents.values()))

    def __len__(self) -> int:
        return len(self._agents)


# -- the bus events an agent dispatches itself (dsh.agent.hooks re-exports them) ----------------


@dataclass(frozen=True, slots=True)
class AgentOnly:
    agent: Agent


@dataclass(frozen=True, slots=True)
class AgentError:
    agent: Agent
    turn: int
    step: int
    error: BaseException


@dataclass(frozen=True, slots=True)
class AgentQueued:
    agent: Agent
    content: Sequence[Mapping[str, object]]
    meta: Mapping[str, object]  # {"source": ..., "steering": bool}


@dataclass(frozen=True, slots=True)
class AgentStatus:
    agent: Agent
    status: Status


AGENT_DISPOSED: Hook[AgentOnly] = Hook("agent/disposed", AgentOnly)
AGENT_ERROR: Hook[AgentError] = Hook("agent/error", AgentError)
AGENT_QUEUED: Hook[AgentQueued] = Hook("agent/queued", AgentQueued)
AGENT_STATUS: Hook[AgentStatus] = Hook("agent/status", AgentStatus)


# -- turns outside the driver ---------------------------------------------------------------------


def side_turn(session: Session, source: Source | JsonObject, body: Callable[[int], TurnEndReason]) -> int:
    """Write a one-shot turn now, the one way to write a turn the driver does not run (idle
    ``inject``, idle compaction): ``turn/start`` (trigger ``injection``), whatever ``body(turn)``
    appends, and ``turn/end`` with the reason it returns; returns the turn number.

    Synchronous, so nothing can interleave; only call it when no turn is open. A ``body`` that
    raises still gets its turn closed (``error``) before the exception goes on.
    """
    turn = session.last_turn + 1
    session.append("turn/start", turn_start(turn, "injection", source))
    try:
        reason = body(turn)
    except Exception as exc:
        session.append("turn/end", turn_end(turn, reason_for(0, exc)))
        raise
    session.append("turn/end", turn_end(turn, reason))
    return turn


async def flush_turn(ctx: Context, agent: Agent, turn: int, step: int = 0) -> None:
    """Flush the agent's session after a turn end; a failure is logged and reported as
    ``agent/error``, never raised (the turn is already closed in memory)."""
    sessions = ctx.get(SESSIONS)
    if sessions is None:
        return
    try:
        await sessions.flush(agent.session)
    except Exception as exc:
        log.warning('agent "%s": session/flush failed at turn %s: %s', agent.id, turn, exc)
        ctx.emit(AGENT_ERROR, AgentError(agent, turn, step, exc))


AGENTS: ServiceKey[AgentRegistry] = ServiceKey("agents")
"""The agent registry service (``ctx.require(AGENTS)``)."""


def apply(ctx: Context, config: object = None) -> None:
    AgentRegistry.apply(ctx, config)
