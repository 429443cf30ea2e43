"""The agent loop service (``AGENT_LOOP``): creates and resumes agents and runs their drivers.

Owns the driver (one task per agent: it waits for queued prompts and runs each batch as one
turn through :mod:`dsh.agent.turn`), resume, disposal, and the loop's config. The turn, the step
(:mod:`dsh.agent.step`), tool execution (:mod:`dsh.agent.tool_exec`) and the dev invariant check
(:mod:`dsh.agent.invariant`) are their own modules; the per-agent run state is
:class:`~dsh.agent.agent.RunState`.

Config (all optional): ``agents`` (config-driven agents, docs/agent-loop.md), ``maxStepsPerTurn``
(default 64), ``toolAbortGraceMs`` (default 100: how long a running tool may take to honour an
abort), ``checkpointBeforeModel`` and ``checkpointBeforeTools`` (default true: buffered events
are written, without fsync, before each model call and before each tool runs, so a killed
process loses neither), ``devChecks`` (default: env ``DSH_DEV_CHECKS``; checks every request
against the log) and ``freezeHistory`` (default false; see :mod:`dsh.agent.heap`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from typing import Annotated

import msgspec

from dsh.agent.agent import AGENTS, Agent, AgentOptions
from dsh.agent.heap import HistoryHeap
from dsh.agent.hooks import (
    AGENT_CREATED,
    AGENT_ERROR,
    SESSION_START,
    AgentError,
    AgentOnly,
    SessionStart,
)
from dsh.agent.invariant import InvariantError
from dsh.agent.sessions import SESSIONS
from dsh.agent.step import StepRunner, header_key
from dsh.agent.step_context import StepSettings
from dsh.agent.turn import TurnRunner
from dsh.agent.turns import TurnError
from dsh.persistence.base import SESSION_STORE
from dsh.runtime import Context, ServiceKey
from dsh.session import Session
from dsh.session.vocab import JsonObject

__all__ = ["AGENT_LOOP", "AgentEntry", "AgentLoop", "Config", "InvariantError", "TurnError", "apply"]

log = logging.getLogger("dsh.agent")

name = "agent-loop"
inject = ["agents", "sessions", "llm", "tools", "system_prompt"]

DEFAULT_MAX_STEPS = 64
DEFAULT_TOOL_ABORT_GRACE_MS = 100


class AgentEntry(msgspec.Struct, rename="camel"):
    id: str
    model: str | None = None
    cwd: str | None = None
    resume_session_id: str | None = None


class Config(msgspec.Struct, rename="camel"):
    agents: list[AgentEntry] = msgspec.field(default_factory=list)
    max_steps_per_turn: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_MAX_STEPS
    # How long a running tool may take to honour an abort (and report its own result) before
    # its step is cancelled outright.
    tool_abort_grace_ms: Annotated[int, msgspec.Meta(ge=0)] = DEFAULT_TOOL_ABORT_GRACE_MS
    dev_checks: bool | None = None
    # Opt-in (process-wide): see dsh.agent.heap. Applications set it; the library never does.
    freeze_history: bool = False
    # Checkpoint (write, no fsync) before each model call and before each tool runs; see step.py.
    checkpoint_before_model: bool = True
    checkpoint_before_tools: bool = True


def _latest_header(session: Session) -> JsonObject | None:
    for event in reversed(session.events):
        if event.type == "request/header":
            header = event.data.get("header")
            return header if isinstance(header, dict) else None
    return None


class AgentLoop:
    """Creates and resumes agents and runs their drivers."""

    def __init__(self, ctx: Context, config: Config) -> None:
        self._ctx = ctx
        self._config = config
        self._agents: dict[str, Agent] = {}
        env_checks = os.environ.get("DSH_DEV_CHECKS", "") not in ("", "0")
        self.dev_checks = config.dev_checks if config.dev_checks is not None else env_checks
        self.max_steps = config.max_steps_per_turn
        self._heap = HistoryHeap() if config.freeze_history else None
        settings = StepSettings(
            dev_checks=self.dev_checks,
            checkpoint_before_model=config.checkpoint_before_model,
            checkpoint_before_tools=config.checkpoint_before_tools,
            tool_abort_grace=max(0, config.tool_abort_grace_ms) / 1000,
        )
        self.checkpoint_before_model = settings.checkpoint_before_model
        self.checkpoint_before_tools = settings.checkpoint_before_tools
        self.tool_abort_grace = settings.tool_abort_grace
        self._turns = TurnRunner(ctx, StepRunner(ctx, settings), self.max_steps)

    # -- lifecycle ---------------------------------------------------------------------------

    def create(
        self,
        agent_id: str,
        *,
        model: str | None = None,
        cwd: str | None = None,
        session_id: str | None = None,
        options: AgentOptions | None = None,
        parent_session: str | None = None,
    ) -> Agent:
        """A new agent on a fresh session ``<agent_id>-session-<uuid4>``; its driver starts.

        ``options`` (a delegated child's system prompt and tool filter) win over ``model``;
        ``parent_session`` goes into the new session's header.
        """
        self._check_free(agent_id)
        session = self._ctx.require(SESSIONS).create(
            session_id or f"{agent_id}-session-{uuid.uuid4()}", cwd=cwd, parent_session=parent_session
        )
        return self._start(agent_id, session, options or AgentOptions(model=model), None, resumed=False)

    async def resume(self, agent_id: str, session_id: str, *, model: str | None = None) -> Agent:
        """Load a session through the mounted store (crash repair applied) and continue it.

        Turn numbering continues from the log; the first request logs ``request/header`` with
        reason ``resume``. Without ``model``, the model of the latest logged header is used.
        """
        self._check_free(agent_id)
        store = self._ctx.get(SESSION_STORE)
        if store is None:
            raise RuntimeError("cannot resume: no session store is mounted")
        stored = await store.load(session_id)
        try:
            session = stored.live()
            self._check_free(agent_id)
            self._ctx.require(SESSIONS).adopt(session)
        except BaseException:
            await store.release(session_id)
            raise
        header = _latest_header(session)
        if model is None and header is not None:
            config = header.get("config")
            found = config.get("model") if isinstance(config, Mapping) else None
            model = found if isinstance(found, str) and found else None
        return self._start(agent_id, session, AgentOptions(model=model), header, resumed=True)

    def _check_free(self, agent_id: str) -> None:
        if self._ctx.require(AGENTS).get(agent_id) is not None:
            raise ValueError(f'agent "{agent_id}" is already registered')

    def _start(
        self,
        agent_id: str,
        session: Session,
        options: AgentOptions,
        last_header: JsonObject | None,
        *,
        resumed: bool,
    ) -> Agent:
        agent = Agent(self._ctx, agent_id, session, options)
        unregister = self._ctx.require(AGENTS).register(agent)
        state = agent.run_state
        state.loop = self
        state.last_header = last_header
        state.last_header_key = header_key(last_header) if last_header is not None else None
        self._agents[agent_id] = agent
        self._ctx.emit(AGENT_CREATED, AgentOnly(agent))
        self._ctx.emit(SESSION_START, SessionStart(agent, "resume" if resumed else "startup"))
        state.driver = asyncio.get_running_loop().create_task(self._drive(agent, unregister))
        return agent

    async def dispose_agent(self, agent: Agent) -> None:
        """Stop the driver (an open turn ends ``disposed``), drain and release the session.

        Called from inside the agent's own turn (a listener or a tool), it only marks the agent
        disposed and aborts the step; the turn then closes on its own.
        """
        state = agent.run_state
        driver = state.driver
        if agent.disposed and (driver is None or driver.done()):
            return
        state.mark_disposed()
        if state.step_controller is not None:
            state.step_controller.abort("disposed")
        current = asyncio.current_task()
        if current is driver or (current is not None and current is state.step_task):
            return
        if driver is not None:
            await asyncio.gather(driver, return_exceptions=True)

    async def dispose(self) -> None:
        for agent in list(self._agents.values()):
            await self.dispose_agent(agent)

    # -- driver ------------------------------------------------------------------------------

    async def _drive(self, agent: Agent, unregister: Callable[[], None]) -> None:
        state = agent.run_state
        try:
            while state.status != "disposed":
                if not state.queued:
                    state.cancel_reason = None
                    state.settle_idle()
                    await state.wait_for_work()
                    continue
                # A cancel that raced the wakeup applied to the messages it cleared, not to
                # messages sent after it.
                state.cancel_reason = None
                state.set_status("running")
                if agent.disposed:
                    break
                if not state.queued:
                    # A status listener cancelled: nothing left to run.
                    state.set_status("idle")
                    continue
                turn = agent.session.last_turn + 1
                terminal = False
                try:
                    terminal = await self._turns.run(agent, turn)
                except Exception as exc:
                    log.warning('agent "%s": turn %s failed before it started: %s', agent.id, turn, exc)
                    self._ctx.emit(AGENT_ERROR, AgentError(agent, turn, 0, exc))
                if self._heap is not None:
                    self._heap.after_turn(sum(len(a.session) for a in self._agents.values()))
                state.cancel_reason = None
                if state.steering and not terminal:
                    state.queued.extend(state.steering)
                state.steering.clear()
                if not state.queued:
                    state.set_status("idle")
        finally:
            state.mark_disposed()
            state.settle_idle()
            if self._agents.get(agent.id) is agent:
                del self._agents[agent.id]
            try:
                await self._ctx.require(SESSIONS).dispose(agent.session)
            except Exception as exc:
                log.warning('agent "%s": final session drain failed: %s', agent.id, exc)
                self._ctx.emit(AGENT_ERROR, AgentError(agent, agent.session.last_turn, 0, exc))
            unregister()


AGENT_LOOP: ServiceKey[AgentLoop] = ServiceKey("agent_loop")
"""The agent loop service (``ctx.require(AGENT_LOOP)``)."""


async def apply(ctx: Context, config: Config) -> None:
    loop = AgentLoop(ctx, config)
    ctx.provide(AGENT_LOOP, loop)
    ctx.defer(loop.dispose)
    for entry in config.agents:
        if entry.resume_session_id:
            try:
                await loop.resume(entry.id, entry.resume_session_id, model=entry.model)
            except Exception as exc:
                # docs/agent-loop.md: a failed resume is logged and creates no agent.
                log.error('agent "%s": cannot resume session "%s": %s', entry.id, entry.resume_session_id, exc)
        else:
            loop.create(entry.id, model=entry.model, cwd=entry.cwd or os.getcwd())
