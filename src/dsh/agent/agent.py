"""Agents and the agent registry (``AGENTS``).

Owns :class:`Agent`, a plain handle: its ``send``/``steer``/``inject``/``cancel``/``when_idle``
surface (docs/agent-loop.md) feeds the loop-owned :class:`~dsh.agent.state.RunState`; the driver
that turns queued prompts into turns lives in :mod:`dsh.agent.loop`. Also owns
:class:`AgentRegistry`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from dsh import _json
from dsh.agent.hooks import AGENT_DISPOSED, AGENT_QUEUED, AgentOnly, AgentQueued
from dsh.agent.state import QueuedMessage, RunState, Status
from dsh.agent.turns import flush_turn, side_turn
from dsh.runtime import Context, ServiceKey
from dsh.session import Session
from dsh.session.vocab import COMPLETED, ContextMessageData, JsonObject, TurnEndReason

__all__ = ["AGENTS", "Agent", "AgentDisposedError", "AgentOptions", "AgentRegistry", "QueuedMessage", "Status"]

Content = Sequence[Mapping[str, object]]
USER_SOURCE: JsonObject = {"kind": "user"}

name = "agents"


class AgentDisposedError(RuntimeError):
    code = "DISPOSED"


@dataclass
class AgentOptions:
    model: str | None = None


def _snapshot_message(content: Content, source: Mapping[str, object] | None) -> QueuedMessage:
    try:
        snap_content = _json.snapshot(list(content))[0]
        snap_source = _json.snapshot(dict(source) if source is not None else USER_SOURCE)[0]
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


AGENTS: ServiceKey[AgentRegistry] = ServiceKey("agents")
"""The agent registry service (``ctx.require(AGENTS)``)."""


def apply(ctx: Context, config: object = None) -> None:
    AgentRegistry.apply(ctx, config)
