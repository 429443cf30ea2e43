"""Delegation runs (``SUBAGENTS``): each child is a full durable session in the parent's store.

Owns one run: the depth check, the child session (its header's ``parentSession`` and a first
``subagent/link`` event with ``parentSession``, ``parentCallId``, ``delegationDepth``,
``origin: "subagent"``, the agent's name and the call's description), the child agent (the
parent's model unless the definition names another, its own system prompt, its tool filter), the
bounded pool (``maxParallel``), cancellation (the parent's abort cancels the child, whose turn
ends ``aborted``), and the outcome. Also owns crash repair of children: when a parent session is
resumed, every child session of it still holding an open turn is loaded through the store (which
closes that turn as ``interrupted``) and released, depth first.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from dsh.agent.agent import Agent, AgentOptions
from dsh.agent.loop import AGENT_LOOP
from dsh.llm.service import LLM
from dsh.persistence.base import SESSION_STORE, SessionStore, StoreError
from dsh.plugins.subagent.definitions import AgentDefinition
from dsh.plugins.subagent.lineage import LINK_EVENT, depth_of
from dsh.plugins.subagent.tool import failure_text, stop_reason_error
from dsh.runtime import Context, Hook, ServiceKey
from dsh.runtime.abort import AbortSignal
from dsh.session import Session
from dsh.tools.registry import TOOLS
from dsh.tools.types import ToolError

__all__ = ["CHILD_ENDED", "CHILD_STARTED", "SUBAGENTS", "Child", "ChildEvent", "ChildOutcome", "SubagentService", "repair_children"]

log = logging.getLogger("dsh.subagent")

GENERAL_SYSTEM: Final = (
    "You are a subagent: another agent delegated the task below to you. Work on it with the tools "
    "you have, then answer with a complete, self-contained final result; only your final message "
    "is returned to the agent that delegated the task."
)
# Reminders belong to the session a person talks to: a child's would never be delivered.
CHILD_EXCLUDED: Final = frozenset({"schedule_create", "schedule_list", "schedule_delete"})


@dataclass
class Child:
    """A running child, for progress views: its name, session, the parent's call, and what it
    is doing now."""

    name: str
    description: str
    agent: Agent
    parent: Agent
    call_id: str
    started: float = field(default_factory=time.monotonic)
    tool: str | None = None
    done: bool = False
    cleanup: list[Callable[[], None]] = field(default_factory=list)


@dataclass(frozen=True)
class ChildOutcome:
    session_id: str
    reason: str
    text: str

    @property
    def model_text(self) -> str:
        error = stop_reason_error(self.reason)
        return self.text if error is None else failure_text(error, self.text)


@dataclass(frozen=True, slots=True)
class ChildEvent:
    child: Child


CHILD_STARTED: Hook[ChildEvent] = Hook("subagent/started", ChildEvent)
CHILD_ENDED: Hook[ChildEvent] = Hook("subagent/ended", ChildEvent)


def _final_text(session: Session, turn: int) -> tuple[str, str]:
    """The child turn's end reason and its last assistant text."""
    reason, text = "interrupted", ""
    for event in reversed(session.events):
        data = event.data if isinstance(event.data, Mapping) else {}
        if event.type == "turn/end" and data.get("turn") == turn and reason == "interrupted":
            kind = (data.get("reason") or {}).get("kind")
            reason = kind if isinstance(kind, str) else "error"
        elif event.type == "assistant/message" and data.get("turn") == turn:
            text = "".join(
                str(b.get("text", "")) for b in data.get("content") or () if isinstance(b, Mapping) and b.get("type") == "text"
            )
            break
    return reason, text


class SubagentService:
    """Starts children and waits for them (see the module docstring)."""

    def __init__(self, ctx: Context, *, max_depth: int, max_parallel: int) -> None:
        self._ctx = ctx
        self.max_depth = max_depth
        self._pool = asyncio.Semaphore(max_parallel)
        self._ids = itertools.count(1)
        self.running: dict[str, Child] = {}

    def check_depth(self, parent: Agent) -> int:
        """The child's depth, or the reference's refusal when it would pass ``maxDepth``."""
        child_depth = depth_of(parent.session) + 1
        if child_depth > self.max_depth:
            raise ToolError(f"subagent depth {child_depth} exceeds maxDepth {self.max_depth}", code="SUBAGENT_DEPTH")
        return child_depth

    def _tools(self, parent: Agent, definition: AgentDefinition | None) -> frozenset[str]:
        if definition is not None and definition.own_tools:
            return frozenset(t.name for t in definition.own_tools)
        visible = set(self._ctx.require(TOOLS).names(agent_id=parent.id)) - CHILD_EXCLUDED
        if parent.options.tools is not None:
            visible &= parent.options.tools  # a child never gets a tool its parent lacks
        if definition is not None and definition.tools is not None:
            visible &= set(definition.tools)
        return frozenset(visible)

    def _model(self, parent: Agent, definition: AgentDefinition | None) -> str | None:
        if definition is not None and definition.model:
            llm = self._ctx.get(LLM)
            if llm is None or llm.has_model(definition.model):
                return definition.model
            # Claude Code's "sonnet"/"opus" name no model served here: the parent's serves.
            log.info('subagent "%s": model "%s" is not served here; using the parent\'s', definition.name, definition.model)
        header = parent.last_request_header or {}
        config = header.get("config")
        model = config.get("model") if isinstance(config, Mapping) else None
        return model if isinstance(model, str) and model else parent.options.model

    async def run(
        self,
        parent: Agent,
        call_id: str,
        prompt: str,
        description: str,
        definition: AgentDefinition | None,
        signal: AbortSignal,
        *,
        on_start: Callable[[str], None] | None = None,
    ) -> ChildOutcome:
        """Run one child to the end of its turn; the child's session is flushed and released."""
        depth = self.check_depth(parent)
        async with self._pool:
            if signal.aborted:
                raise ToolError(str(signal.reason or "subagent delegation aborted"))
            return await self._run(parent, call_id, prompt, description, definition, signal, depth, on_start)

    async def _run(
        self,
        parent: Agent,
        call_id: str,
        prompt: str,
        description: str,
        definition: AgentDefinition | None,
        signal: AbortSignal,
        depth: int,
        on_start: Callable[[str], None] | None,
    ) -> ChildOutcome:
        name = definition.name if definition is not None else "general-purpose"
        options = AgentOptions(
            model=self._model(parent, definition),
            system=definition.prompt if definition is not None and definition.prompt else GENERAL_SYSTEM,
            tools=self._tools(parent, definition),
            label=name,
            delegated_by=(parent, call_id),
        )
        session_id = f"subagent-{uuid.uuid4()}"
        agent = self._ctx.require(AGENT_LOOP).create(
            f"{parent.id}/{name}-{next(self._ids)}",
            cwd=parent.session.header.get("cwd"),
            session_id=session_id,
            options=options,
            parent_session=parent.session.id,
        )
        # Written before the driver runs: the link is the child's first event.
        agent.session.append(
            LINK_EVENT,
            {"parentSession": parent.session.id, "parentCallId": call_id, "delegationDepth": depth,
             "origin": "subagent", "agent": name, "description": description},
        )
        child = Child(name, description, agent, parent, call_id)
        registry = self._ctx.require(TOOLS)
        for own in definition.own_tools if definition is not None else ():
            child.cleanup.append(registry.register(own, agent_id=agent.id))
        self.running[session_id] = child
        if on_start is not None:
            on_start(session_id)
        self._ctx.emit(CHILD_STARTED, ChildEvent(child))
        stop = signal.add_listener(lambda: agent.cancel(str(signal.reason or "cancelled")))
        try:
            agent.send([{"type": "text", "text": prompt}], source=self._source(parent))
            await agent.when_idle()
        except asyncio.CancelledError:
            # The parent's step is being torn down: the child stops too, and is released.
            agent.cancel("the delegating turn was cancelled")
            asyncio.get_running_loop().create_task(self._finish(child))
            raise
        finally:
            stop()
        reason, text = _final_text(agent.session, agent.session.last_turn)
        await self._finish(child)
        return ChildOutcome(session_id, reason, text)

    async def _finish(self, child: Child) -> None:
        child.done = True
        try:
            await child.agent.dispose()
        finally:
            for undo in child.cleanup:
                undo()
            self.running.pop(child.agent.session.id, None)
            self._ctx.emit(CHILD_ENDED, ChildEvent(child))

    @staticmethod
    def _source(parent: Agent) -> dict[str, Any]:
        """The prompt's source: the delegation, in the zone of the person the parent serves."""
        source: dict[str, Any] = {"kind": "user"}
        for event in reversed(parent.session.events):
            if event.type == "turn/start" and isinstance(event.data, Mapping):
                parent_source = event.data.get("source")
                if isinstance(parent_source, Mapping) and isinstance(parent_source.get("clientTimeZone"), str):
                    source["clientTimeZone"] = parent_source["clientTimeZone"]
                break
        return source


async def repair_children(store: SessionStore, parent_id: str, *, seen: set[str] | None = None) -> list[str]:
    """Close the open turns of ``parent_id``'s child sessions (and theirs) left by a crash."""
    seen = seen if seen is not None else set()
    repaired: list[str] = []
    for info in await store.list():
        if info.header.get("parentSession") != parent_id or info.id in seen:
            continue
        seen.add(info.id)
        try:
            stored = await store.read(info.id)
            if any(e.type == "turn/end" for e in stored.events[-1:]) or not stored.events:
                repaired += await repair_children(store, info.id, seen=seen)
                continue
            await store.load(info.id)  # closes the open turn durably (crash repair)
            await store.release(info.id)
            repaired.append(info.id)
        except StoreError as exc:
            log.warning('cannot repair child session "%s": %s', info.id, exc)
            continue
        repaired += await repair_children(store, info.id, seen=seen)
    return repaired


def store_of(ctx: Context) -> SessionStore | None:
    return ctx.get(SESSION_STORE)


SUBAGENTS: ServiceKey[SubagentService] = ServiceKey("subagents")
"""The delegation service (``ctx.get(SUBAGENTS)``)."""
