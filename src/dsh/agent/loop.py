"""The agent loop (``ctx.agent_loop``): drives turns and steps against the durable session.

Owns the driver (one task per agent), the exact append order of a turn and a step
(docs/agent-loop.md), request-header logging, tool execution order, turn-end reasons, flushing at every
turn end, resume, and the request/derive invariant check used in development.

Why steps run in a child task: cancellation must interrupt a stream or a tool that is not
watching its signal, and cancelling one child task per step is cheaper than racing every chunk.
A running tool first gets ``toolAbortGraceMs`` to honour its signal and report its own result;
a tool cut off after that still gets a ``tool/result`` (``Error: <reason>``, ``isError``), so
every logged ``tool/call`` stays paired.

Config (all optional): ``agents`` (config-driven agents, docs/agent-loop.md), ``maxStepsPerTurn``
(the safety cap, default 64: past it the turn ends ``error`` with code ``MAX_STEPS``),
``toolAbortGraceMs`` (default 100), ``checkpointBeforeModel`` and ``checkpointBeforeTools``
(default true: buffered events are written, without fsync, before each model call and before
each tool runs, so a killed process loses neither) and ``devChecks`` (default: env ``DSH_DEV_CHECKS``), which
checks every request against the log (prefix + history derived before its ``step/start``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

import msgspec

from dsh import _json
from dsh.agent.agent import Agent, AgentOptions, QueuedMessage
from dsh.llm.assembler import ChunkAssembler
from dsh.llm.types import LlmRequest
from dsh.runtime import AbortController, AbortSignal, Context, ServiceKey
from dsh.session import SURFACE_TYPES, Event, Session, project

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
    # See _HistoryHeap: keeps CPython's full collections from growing with the session.
    freeze_history: bool = True
    # Checkpoint (write, no fsync) before each model call and before each tool runs; see _run_step.
    checkpoint_before_model: bool = True
    checkpoint_before_tools: bool = True


class TurnError(Exception):
    """A failure that ends a turn with ``{kind: 'error', step, message, code?}``."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class InvariantError(AssertionError):
    """A request whose messages differ from the prefix plus the log-derived history."""

    code = "INVARIANT"


@dataclass
class StepResult:
    had_tool_calls: bool
    finish: dict[str, Any]


def _error_code(exc: BaseException) -> str | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else None


def _messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(message) for message in messages]


def _inject_context(agent: Agent, context: Any) -> None:
    """Append one ``additionalContexts`` entry (``{content, source?, envelope?, meta?}``)."""
    if not isinstance(context, Mapping):
        raise TypeError("an additionalContexts entry must be a mapping with content")
    agent.inject(
        context.get("content") or [],
        source=context.get("source"),
        envelope=context.get("envelope"),
        meta=context.get("meta"),
    )


class _Instance:
    """Per-agent loop state that lives as long as this loop instance (not durable)."""

    def __init__(self, agent: Agent, last_header: dict[str, Any] | None) -> None:
        self.agent = agent
        self.first_request = True
        self.prefix: list[dict[str, Any]] | None = None
        # The latest logged header: found by one backward scan when the instance starts, then
        # kept current as this instance logs headers (no per-step scan).
        self.last_header = last_header
        self.last_header_key = _header_key(last_header) if last_header is not None else None
        self.step_task: asyncio.Task[StepResult] | None = None
        self.in_tool = False
        self.shadow: _ShadowFold | None = None


def _latest_header(session: Session) -> dict[str, Any] | None:
    for event in reversed(session.events):
        if event.type == "request/header":
            header = event.data.get("header")
            return header if isinstance(header, dict) else None
    return None


class _ShadowFold:
    """An independent, naive fold of the raw log's surface, for the request/derive dev check.

    It is advanced lazily to each step's ``step/start``, so keeping it costs only the new
    events. :meth:`check` compares a request against it: the messages added since the previous
    check always, the whole history whenever a replace happened or the history doubled since
    the last full comparison, so the check stays amortised O(new messages) per step and a long
    session under dev checks does not slow down as it grows.
    """

    def __init__(self) -> None:
        self.nodes: list[int] = []
        self.messages: list[Any] = []
        self.seen = 0
        self.generation = 0
        self.full_generation = -1
        self.full_length = 0
        self.last_length = 0

    def advance(self, session: Session, upto: int) -> list[Any]:
        events = session.events
        for event in events[self.seen : upto]:
            if event.type not in SURFACE_TYPES:
                continue
            op = event.surface_op
            if op == "append":
                self.nodes.append(event.seq)
                message = project(event)
                if message is not None:
                    self.messages.append(message)
            elif isinstance(op, Mapping):
                i = self.nodes.index(op["start"])
                j = self.nodes.index(op["end"])
                self.nodes[i : j + 1] = [event.seq]
                projected = (project(events[seq]) for seq in self.nodes)
                self.messages = [m for m in projected if m is not None]
                self.generation += 1
        self.seen = upto
        return self.messages

    def check(self, prefix: Sequence[Any], messages: Sequence[Any]) -> bool:
        """Whether ``messages`` equals ``prefix`` plus the folded history (see the class doc)."""
        derived = self.messages
        length = len(prefix) + len(derived)
        if len(messages) != length:
            return False
        full = self.generation != self.full_generation or length >= 2 * max(self.full_length, 1)
        start = 0 if full else min(self.last_length, length)
        ok = True
        if start < len(prefix):
            ok = list(messages[start : len(prefix)]) == list(prefix[start:])
            start = len(prefix)
        ok = ok and list(messages[start:]) == derived[start - len(prefix) :]
        if ok and full:
            self.full_generation, self.full_length = self.generation, length
        self.last_length = length
        return ok


class _HistoryHeap:
    """Keeps full garbage collections from growing with the session (CPython).

    A live log is immutable and only grows, yet every full collection walks all of its dicts:
    at 100,000 events that is a 75 ms pause, and it recurs. When the live logs have doubled since
    the last time, collect once and freeze the survivors (``gc.freeze``), so later collections
    skip the history. The doubling makes the cost amortised constant per event. Frozen objects
    are still freed by reference counting; only cycles that were already garbage at a freeze
    would outlive it, and the full collection just before each freeze leaves none.
    """

    FIRST = 4096

    def __init__(self) -> None:
        self._next = self.FIRST

    def after_turn(self, live_events: int) -> None:
        if live_events >= self._next:
            gc.collect()
            gc.freeze()
            self._next = 2 * live_events


class AgentLoop:
    """Creates and resumes agents and runs their drivers."""

    def __init__(self, ctx: Context, config: Config) -> None:
        self._ctx = ctx
        self._config = config
        self._instances: dict[str, _Instance] = {}
        env_checks = os.environ.get("DSH_DEV_CHECKS", "") not in ("", "0")
        self.dev_checks = config.dev_checks if config.dev_checks is not None else env_checks
        self.max_steps = config.max_steps_per_turn
        self._heap = _HistoryHeap() if config.freeze_history else None
        self.checkpoint_before_model = config.checkpoint_before_model
        self.checkpoint_before_tools = config.checkpoint_before_tools
        self.tool_abort_grace = max(0, config.tool_abort_grace_ms) / 1000

    # -- lifecycle ---------------------------------------------------------------------------

    def create(
        self,
        agent_id: str,
        *,
        model: str | None = None,
        cwd: str | None = None,
        session_id: str | None = None,
    ) -> Agent:
        """A new agent on a fresh session ``<agent_id>-session-<uuid4>``; its driver starts."""
        self._check_free(agent_id)
        session = self._ctx.sessions.create(
            session_id or f"{agent_id}-session-{uuid.uuid4()}", cwd=cwd
        )
        return self._start(agent_id, session, AgentOptions(model=model), None, resumed=False)

    async def resume(self, agent_id: str, session_id: str, *, model: str | None = None) -> Agent:
        """Load a session through the mounted store (crash repair applied) and continue it.

        Turn numbering continues from the log; the first request logs ``request/header`` with
        reason ``resume``. Without ``model``, the model of the latest logged header is used.
        """
        self._check_free(agent_id)
        store = self._ctx.get("session_store")
        if store is None:
            raise RuntimeError("cannot resume: no session store is mounted")
        stored = await store.load(session_id)
        try:
            session = stored.live()
            self._check_free(agent_id)
            self._ctx.sessions.adopt(session)
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
        if self._ctx.agents.get(agent_id) is not None:
            raise ValueError(f'agent "{agent_id}" is already registered')

    def _start(
        self,
        agent_id: str,
        session: Session,
        options: AgentOptions,
        last_header: dict[str, Any] | None,
        *,
        resumed: bool,
    ) -> Agent:
        agent = Agent(self._ctx, agent_id, session, options)
        unregister = self._ctx.agents.register(agent)
        instance = _Instance(agent, last_header)
        self._instances[agent_id] = instance
        sessions = self._ctx.sessions
        agent.on_inject_flush = lambda: sessions.flush(session)
        agent.on_dispose = lambda: self.dispose_agent(agent)
        self._ctx.emit("agent/created", agent)
        self._ctx.emit("agent/session-start", agent, "resume" if resumed else "startup")
        agent.driver = asyncio.get_running_loop().create_task(self._drive(instance, unregister))
        return agent

    async def dispose_agent(self, agent: Agent) -> None:
        """Stop the driver (an open turn ends ``disposed``), drain and release the session.

        Called from inside the agent's own turn (a listener or a tool), it only marks the agent
        disposed and aborts the step; the turn then closes on its own.
        """
        driver = agent.driver
        if agent.disposed and (driver is None or driver.done()):
            return
        agent.mark_disposed()
        if agent.step_controller is not None:
            agent.step_controller.abort("disposed")
        instance = self._instances.get(agent.id)
        current = asyncio.current_task()
        if current is driver or (instance is not None and current is instance.step_task):
            return
        if driver is not None:
            await asyncio.gather(driver, return_exceptions=True)

    async def dispose(self) -> None:
        for instance in list(self._instances.values()):
            await self.dispose_agent(instance.agent)

    # -- driver ------------------------------------------------------------------------------

    async def _drive(self, instance: _Instance, unregister: Any) -> None:
        agent = instance.agent
        try:
            while not agent.disposed:
                if not agent.queued:
                    agent.cancel_reason = None
                    agent.settle_idle()
                    await agent.wait_for_work()
                    continue
                # A cancel that raced the wakeup applied to the messages it cleared, not to
                # messages sent after it.
                agent.cancel_reason = None
                agent.set_status("running")
                if agent.disposed:
                    break
                if not agent.queued:
                    # A status listener cancelled: nothing left to run.
                    agent.set_status("idle")
                    continue
                turn = agent.session.last_turn + 1
                terminal = False
                try:
                    terminal = await self._run_turn(instance, turn)
                except Exception as exc:
                    log.warning('agent "%s": turn %s failed before it started: %s', agent.id, turn, exc)
                    self._ctx.emit("agent/error", agent, turn, 0, exc)
                agent.cancel_reason = None
                if agent.steering and not terminal:
                    agent.queued.extend(agent.steering)
                agent.steering.clear()
                if not agent.queued:
                    agent.set_status("idle")
        finally:
            agent.mark_disposed()
            agent.settle_idle()
            if self._instances.get(agent.id) is instance:
                del self._instances[agent.id]
            try:
                await self._ctx.sessions.dispose(agent.session)
            except Exception as exc:
                log.warning('agent "%s": final session drain failed: %s', agent.id, exc)
                self._ctx.emit("agent/error", agent, agent.session.last_turn, 0, exc)
            unregister()

    # -- one turn ----------------------------------------------------------------------------

    async def _run_turn(self, instance: _Instance, turn: int) -> bool:
        """Run one turn; returns whether it ended in a terminal stop (steering discarded)."""
        agent = instance.agent
        session = agent.session
        batch = list(agent.queued)
        agent.queued.clear()
        session.append("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": batch[0].source}})
        step = 0
        step_open = False
        terminal = False
        hit_max_tokens = False
        reason: dict[str, Any] | None = None
        try:
            reason = await self._submit_prompts(agent, batch)
            while reason is None:
                step += 1
                if step > self.max_steps:
                    step -= 1
                    error = TurnError(f"turn {turn} exceeded {self.max_steps} steps", "MAX_STEPS")
                    log.warning('agent "%s": %s', agent.id, error)
                    self._ctx.emit("agent/error", agent, turn, step, error)
                    reason = _error_reason(step, error)
                    break
                self._drain_steering(agent, turn)
                controller = AbortController()
                agent.step_controller = controller
                if agent.cancel_reason is not None:
                    controller.abort(agent.cancel_reason)
                system = self._render_system(agent)
                tools = self._ctx.tools.schemas()
                reason = self._stop_reason(agent)
                if reason is not None:
                    break
                if instance.prefix is None:
                    prefix: Any = await self._ctx.waterfall(
                        "agent/session-prefix", agent, [], controller.signal, default=list
                    )
                    instance.prefix = _messages(prefix or [])
                    reason = self._stop_reason(agent)
                    if reason is not None:
                        break
                await self._ctx.serial(
                    "agent/pre-step", agent, turn, step, system, instance.prefix, controller.signal
                )
                reason = self._stop_reason(agent)
                if reason is not None:
                    break
                boundary = session.derive_messages()
                step_start = session.append("step/start", {"turn": turn, "step": step})
                step_open = True
                reason = self._stop_reason(agent)
                if reason is not None:
                    step_open = False
                    session.append("step/end", {"turn": turn, "step": step})
                    break
                try:
                    result = await self._run_step_cancellable(
                        instance, turn, step, system, tools, boundary, step_start, controller
                    )
                except Exception as exc:
                    step_open = False
                    session.append("step/end", {"turn": turn, "step": step})
                    reason = self._failure_reason(agent, controller.signal, turn, step, exc)
                    break
                if result.finish.get("kind") == "max-tokens":
                    hit_max_tokens = True
                drained = self._drain_steering(agent, turn)
                step_open = False
                session.append("step/end", {"turn": turn, "step": step})
                default = "continue" if (result.had_tool_calls or drained) else "stop"
                decision: Any = await self._ctx.waterfall(
                    "agent/turn-continuation", agent, turn, default, default=partial(_identity, default)
                )
                action, note = _decision(decision)
                if note:
                    agent.steering.append(QueuedMessage([{"type": "text", "text": note}], {"kind": "user"}))
                if agent.steering:
                    action = "continue"
                if action == "continue":
                    bail = await self._ctx.serial("agent/turn-stop", agent, turn)
                    if bail is not None and bail is not False:
                        terminal = True
                        agent.steering.clear()
                        action = "stop"
                reason = self._stop_reason(agent)
                if reason is None and action != "continue":
                    reason = {"kind": "max-tokens"} if hit_max_tokens else {"kind": "completed"}
        except Exception as exc:
            if step_open:
                session.append("step/end", {"turn": turn, "step": step})
            if agent.disposed:
                reason = {"kind": "disposed"}
            else:
                reason = _error_reason(step, exc)
                log.warning('agent "%s": turn %s failed: %s', agent.id, turn, exc)
                self._ctx.emit("agent/error", agent, turn, step, exc)
        finally:
            agent.step_controller = None
        session.append("turn/end", {"turn": turn, "reason": reason})
        try:
            await self._ctx.sessions.flush(session)
        except Exception as exc:
            log.warning('agent "%s": session/flush failed at turn %s: %s', agent.id, turn, exc)
            self._ctx.emit("agent/error", agent, turn, step, exc)
        if self._heap is not None:
            self._heap.after_turn(sum(len(i.agent.session) for i in self._instances.values()))
        return terminal

    async def _submit_prompts(self, agent: Agent, batch: list[QueuedMessage]) -> dict[str, Any] | None:
        allowed = 0
        last_block: str | None = None
        for message in batch:
            decision = await self._ctx.waterfall(
                "agent/prompt-submit", agent, message.content, message.source,
                default=lambda: {"kind": "allow"},
            )
            if isinstance(decision, Mapping) and decision.get("kind") == "block":
                last_block = str(decision.get("reason", "blocked"))
                agent.session.append(
                    "prompt/blocked", {"content": message.content, "source": message.source, "reason": last_block}
                )
                continue
            allowed += 1
            content: Any = message.content
            if isinstance(decision, Mapping) and decision.get("content") is not None:
                content = decision["content"]
            agent.session.append("user/message", {"content": content, "source": message.source}, surface_op="append")
            extra = decision.get("additionalContexts") if isinstance(decision, Mapping) else None
            for context in extra or ():
                _inject_context(agent, context)
        if allowed == 0:
            return {"kind": "rejected", "reason": last_block or "blocked"}
        return None

    def _drain_steering(self, agent: Agent, turn: int) -> bool:
        drained = False
        while agent.steering:
            message = agent.steering.popleft()
            agent.session.append(
                "steering/message", {"turn": turn, "content": message.content, "source": message.source},
                surface_op="append",
            )
            drained = True
        return drained

    def _stop_reason(self, agent: Agent) -> dict[str, Any] | None:
        if agent.disposed:
            return {"kind": "disposed"}
        if agent.cancel_reason is not None:
            return {"kind": "aborted", "reason": agent.cancel_reason}
        return None

    def _failure_reason(
        self, agent: Agent, signal: AbortSignal, turn: int, step: int, exc: BaseException
    ) -> dict[str, Any]:
        if agent.disposed:
            return {"kind": "disposed"}
        if signal.aborted:
            return {"kind": "aborted", "reason": str(signal.reason)}
        log.warning('agent "%s": turn %s step %s failed: %s', agent.id, turn, step, exc)
        self._ctx.emit("agent/error", agent, turn, step, exc)
        return _error_reason(step, exc)

    def _render_system(self, agent: Agent) -> str:
        variables = {"model": agent.options.model, "cwd": agent.session.header.get("cwd")}
        rendered: str = self._ctx.system_prompt.render(variables)
        return rendered

    # -- one step ----------------------------------------------------------------------------

    async def _run_step_cancellable(
        self,
        instance: _Instance,
        turn: int,
        step: int,
        system: str,
        tools: list[dict[str, Any]],
        boundary: Sequence[dict[str, Any]],
        step_start: Event,
        controller: AbortController,
    ) -> StepResult:
        task = asyncio.get_running_loop().create_task(
            self._run_step(instance, turn, step, system, tools, boundary, step_start, controller.signal)
        )
        instance.step_task = task
        timers: list[asyncio.TimerHandle] = []

        def on_abort() -> None:
            # A tool gets a moment to honour its signal and report its own result; a stream
            # (or a tool that ignores the signal) is interrupted right away.
            if instance.in_tool and self.tool_abort_grace > 0:
                timers.append(asyncio.get_running_loop().call_later(self.tool_abort_grace, task.cancel))
            else:
                task.cancel()

        remove = controller.signal.add_listener(on_abort)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            # Our own abort cancelled the step task; a cancellation of the driver itself goes on.
            if controller.signal.aborted and (current is None or not current.cancelling()):
                raise TurnError(str(controller.signal.reason), "ABORTED") from None
            raise
        finally:
            remove()
            for timer in timers:
                timer.cancel()
            instance.step_task = None

    async def _run_step(
        self,
        instance: _Instance,
        turn: int,
        step: int,
        system: str,
        tools: list[dict[str, Any]],
        boundary: Sequence[dict[str, Any]],
        step_start: Event,
        signal: AbortSignal,
    ) -> StepResult:
        agent = instance.agent
        session = agent.session
        if instance.first_request or instance.last_header is None:
            seed: dict[str, Any] = {"model": agent.options.model or ""}
        else:
            seed = dict(instance.last_header["config"])
        config = await self._ctx.waterfall("agent/request", agent, turn, step, seed, default=lambda: seed)
        config = dict(config) if isinstance(config, Mapping) else {}
        model = config.get("model")
        if not isinstance(model, str) or not model:
            raise TurnError(
                f'agent "{agent.id}" has no model: set AgentOptions.model or supply one via the agent/request waterfall'
            )
        header: dict[str, Any] = {"config": config}
        if system:
            header["system"] = system
        if tools:
            header["tools"] = tools
        prefix = instance.prefix or []
        if prefix:
            header["messagePrefix"] = prefix
        key = _header_key(header)
        if instance.first_request:
            reason = "initial" if instance.last_header is None else "resume"
            logged = session.append("request/header", {"header": header, "reason": reason})
            instance.last_header, instance.last_header_key = logged.data["header"], key
        elif key != instance.last_header_key:
            logged = session.append("request/header", {"header": header, "reason": "change"})
            instance.last_header, instance.last_header_key = logged.data["header"], key
        instance.first_request = False

        messages: Sequence[dict[str, Any]] = [*prefix, *boundary] if prefix else boundary
        if self.dev_checks:
            self._check_request_invariant(instance, step_start, prefix, messages)
        if self.checkpoint_before_model:
            # A model call can take minutes: write the prompt, the readings and step/start first,
            # so a process killed mid-call leaves a turn that repair closes instead of losing it.
            await self._checkpoint(agent, turn, step)
        request = LlmRequest(
            model=model,
            messages=messages,
            system=system or None,
            tools=tools,
            temperature=config.get("temperature"),
            max_tokens=config.get("maxTokens"),
            stop=config.get("stop"),
            session_id=session.id,
            signal=signal,
        )
        assembler = ChunkAssembler()
        push = assembler.push
        chunk_seqs: list[int] = []
        append = session.append
        stream = self._ctx.llm.stream(request)
        try:
            async for chunk in stream:
                if signal.aborted:
                    raise TurnError(str(signal.reason), "ABORTED")
                chunk_seqs.append(append("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk}).seq)
                push(chunk)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        finish: dict[str, Any] = dict(assembler.finish)
        kind = finish.get("kind")
        if kind == "error":
            code = finish.get("code")
            raise TurnError(
                str(finish.get("message") or "model error"), code if isinstance(code, str) else None
            )
        if kind == "aborted":
            raise TurnError("model stream aborted", "ABORTED")
        max_tokens = kind == "max-tokens"
        content: list[dict[str, Any]] = [dict(b) for b in assembler.blocks()]
        if max_tokens:
            content = [b for b in content if b.get("type") != "tool-call"]
        message: dict[str, Any] = {"role": "assistant", "content": content}
        message = await self._ctx.waterfall(
            "agent/step-result", agent, turn, step, message, default=lambda: message
        )
        content = list(message.get("content") or [])
        usage = assembler.usage
        if content or usage is not None:
            data: dict[str, Any] = {"turn": turn, "step": step, "content": content}
            if usage is not None:
                data["usage"] = usage
            append("assistant/message", data, surface_op="append", source_event_seqs=chunk_seqs or None)
        calls = [] if max_tokens else [b for b in content if b.get("type") == "tool-call"]
        contexts: list[Any] = []
        execute = self._ctx.tools.execute
        for call in calls:
            if signal.aborted:
                raise TurnError(str(signal.reason), "ABORTED")
            call_id, tool_name = call.get("id"), call.get("name")
            raw = call.get("arguments", "")
            call_event = append(
                "tool/call",
                {"turn": turn, "step": step, "callId": call_id, "name": tool_name, "arguments": raw},
            )
            if self.checkpoint_before_tools:
                # A tool can run for minutes and act on the world: the assistant message and this
                # call reach the disk before it starts, so a process killed mid-tool leaves a call
                # that repair closes with the synthetic result, and the model learns it may have run.
                await self._checkpoint(agent, turn, step)
            instance.in_tool = True
            try:
                result = await execute(
                    call_id=call_id, name=tool_name, arguments=_parse_arguments(raw), agent=agent, signal=signal
                )
            except asyncio.CancelledError:
                if not signal.aborted:
                    raise
                # The step was aborted while the tool ran: record the outcome a tool honouring
                # its signal would have reported.
                append(
                    "tool/result",
                    _error_result(turn, step, call_id, f"Error: {signal.reason}"),
                    surface_op="append",
                    source_event_seqs=[call_event.seq],
                )
                raise TurnError(str(signal.reason), "ABORTED") from None
            finally:
                instance.in_tool = False
            data = {
                "turn": turn,
                "step": step,
                "callId": call_id,
                "content": list(result.content),
                "isError": bool(result.is_error),
            }
            if result.error is not None:
                data["error"] = dict(result.error)
            if result.meta is not None:
                data["meta"] = result.meta
            try:
                append("tool/result", data, surface_op="append", source_event_seqs=[call_event.seq])
            except (TypeError, ValueError) as exc:
                # The tool returned what the log cannot hold (not lossless JSON, say); the call
                # still gets its result, or providers reject the history from here on.
                text = f"Error: tool {tool_name} returned a result the session cannot record: {exc}"
                error = {"name": "InvalidToolResult", "code": "INVALID_TOOL_RESULT"}
                append(
                    "tool/result",
                    _error_result(turn, step, call_id, text, error),
                    surface_op="append",
                    source_event_seqs=[call_event.seq],
                )
            contexts.extend(result.additional_contexts or ())
            if signal.aborted:
                raise TurnError(str(signal.reason), "ABORTED")
        for context in contexts:
            _inject_context(agent, context)
        return StepResult(bool(calls), finish)

    async def _checkpoint(self, agent: Agent, turn: int, step: int) -> None:
        try:
            await self._ctx.sessions.checkpoint(agent.session)
        except Exception as exc:
            log.warning('agent "%s": checkpoint failed in turn %s step %s: %s', agent.id, turn, step, exc)
            self._ctx.emit("agent/error", agent, turn, step, exc)

    def _check_request_invariant(
        self,
        instance: _Instance,
        step_start: Event,
        prefix: Sequence[Any],
        messages: Sequence[Any],
    ) -> None:
        """Dev check: the request is the prefix plus the history derived from the raw log
        before this step's ``step/start`` (by an independent fold, not the session's cache)."""
        shadow = instance.shadow
        if shadow is None:
            shadow = instance.shadow = _ShadowFold()
        shadow.advance(instance.agent.session, step_start.seq)
        if not shadow.check(prefix, messages):
            raise InvariantError(
                f"request for session {instance.agent.session.id} at seq {step_start.seq} "
                "differs from the log-derived history"
            )


def _identity(value: Any) -> Any:
    return value


def _error_result(
    turn: int, step: int, call_id: Any, text: str, error: dict[str, str] | None = None
) -> dict[str, Any]:
    """``tool/result`` data answering a call with an error text."""
    data: dict[str, Any] = {
        "turn": turn,
        "step": step,
        "callId": call_id,
        "content": [{"type": "text", "text": text}],
        "isError": True,
    }
    if error is not None:
        data["error"] = error
    return data


def _parse_arguments(raw: str) -> Any:
    if raw == "":
        return {}
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # invalid, or nested deeper than the parser goes
        return raw


def _decision(decision: Any) -> tuple[str, str | None]:
    if isinstance(decision, str):
        return decision, None
    if isinstance(decision, Mapping):
        action = decision.get("action") or decision.get("kind") or "stop"
        note = decision.get("reason")
        return str(action), (str(note) if action == "continue" and note else None)
    return "stop", None


def _error_reason(step: int, exc: BaseException) -> dict[str, Any]:
    reason: dict[str, Any] = {"kind": "error", "step": step, "message": str(exc) or type(exc).__name__}
    code = _error_code(exc)
    if code is None and not isinstance(exc, Exception):
        code = "UNKNOWN"
    if code is not None:
        reason["code"] = code
    return reason


def _header_key(header: Mapping[str, Any]) -> tuple[Any, ...]:
    """What header equality compares: config field by field, system as a string, tools and
    prefix as JSON text."""
    tools = header.get("tools")
    prefix = header.get("messagePrefix")
    return (
        header.get("config"),
        header.get("system"),
        None if tools is None else _json.dumps(tools),
        None if prefix is None else _json.dumps(prefix),
    )


AGENT_LOOP: ServiceKey[AgentLoop] = ServiceKey("agent_loop")
"""The agent loop service (``ctx.require(AGENT_LOOP)``)."""


async def apply(ctx: Context, config: Config) -> None:
    loop = AgentLoop(ctx, config)
    ctx.provide("agent_loop", loop)
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
