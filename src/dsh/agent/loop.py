"""The agent loop (``ctx.agent_loop``): drives turns and steps against the durable session.

Owns the driver (one task per agent), the exact append order of a turn and a step (contracts
§3.3–§3.5), request-header logging, tool execution order, turn-end reasons, flushing at every
turn end, resume, and the request/derive invariant check used in development.

Why steps run in a child task: cancellation must interrupt a stream or a tool that is not
watching its signal, and cancelling one child task per step is cheaper than racing every chunk.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from dsh.agent.agent import Agent, AgentOptions, QueuedMessage
from dsh.llm.assembler import ChunkAssembler
from dsh.llm.types import LlmError, LlmRequest
from dsh.runtime import AbortController, AbortSignal, Context
from dsh.session import Event, Session, derive_messages

log = logging.getLogger("dsh.agent")

name = "agent-loop"
inject = ["agents", "sessions", "llm", "tools", "system_prompt"]

DEFAULT_MAX_STEPS = 64


class AgentEntry(msgspec.Struct, rename="camel"):
    id: str
    model: str | None = None
    cwd: str | None = None
    resume_session_id: str | None = None


class Config(msgspec.Struct, rename="camel"):
    agents: list[AgentEntry] = msgspec.field(default_factory=list)
    max_steps_per_turn: int = DEFAULT_MAX_STEPS
    dev_checks: bool | None = None


class TurnError(Exception):
    """A failure that ends a turn with ``{kind: 'error', step, message, code?}``."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class InvariantError(AssertionError):
    """A request whose messages differ from the prefix plus the log-derived history."""


@dataclass
class StepResult:
    had_tool_calls: bool
    finish: dict[str, Any]


def _error_code(exc: BaseException) -> str | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else None


def _text(content: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(block) for block in content]


class _Instance:
    """Per-agent loop state that lives as long as this loop instance (not durable)."""

    def __init__(self, agent: Agent, resumed: bool) -> None:
        self.agent = agent
        self.resumed = resumed
        self.first_request = True
        self.prefix: list[dict[str, Any]] | None = None
        self.last_header: dict[str, Any] | None = _latest_header(agent.session)


def _latest_header(session: Session) -> dict[str, Any] | None:
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
        self._instances: dict[str, _Instance] = {}
        env_checks = os.environ.get("DSH_DEV_CHECKS", "") not in ("", "0")
        self.dev_checks = config.dev_checks if config.dev_checks is not None else env_checks
        self.max_steps = config.max_steps_per_turn

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
        session = self._ctx.sessions.create(
            session_id or f"{agent_id}-session-{uuid.uuid4()}", cwd=cwd
        )
        return self._start(agent_id, session, AgentOptions(model=model), resumed=False)

    async def resume(self, agent_id: str, session_id: str, *, model: str | None = None) -> Agent:
        """Load a session through the mounted store (crash repair applied) and continue it."""
        store = self._ctx.get("session_store")
        if store is None:
            raise RuntimeError("cannot resume: no session store is mounted")
        stored = await store.load(session_id)
        try:
            session = Session.restore(session_id, stored.events, header=stored.header)
            self._ctx.sessions.adopt(session)
        except Exception:
            await store.release(session_id)
            raise
        if model is None:
            header = _latest_header(session)
            model = header.get("config", {}).get("model") if header else None
        return self._start(agent_id, session, AgentOptions(model=model), resumed=True)

    def _start(self, agent_id: str, session: Session, options: AgentOptions, *, resumed: bool) -> Agent:
        agent = Agent(self._ctx, agent_id, session, options)
        unregister = self._ctx.agents.register(agent)
        instance = _Instance(agent, resumed)
        self._instances[agent_id] = instance
        agent.on_inject_flush = lambda: self._ctx.sessions.flush(session)
        self._ctx.emit("agent/created", agent)
        self._ctx.emit("agent/session-start", agent, "resume" if resumed else "startup")
        agent.driver = asyncio.get_running_loop().create_task(self._drive(instance, unregister))
        return agent

    async def dispose_agent(self, agent: Agent) -> None:
        """Stop the driver (the open turn ends ``disposed``), drain and release the session."""
        if agent.disposed and (agent.driver is None or agent.driver.done()):
            return
        agent.mark_disposed()
        if agent.step_controller is not None:
            agent.step_controller.abort("disposed")
        if agent.driver is not None:
            await asyncio.gather(agent.driver, return_exceptions=True)

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
                agent.set_status("running")
                if agent.disposed:
                    break
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
                if not agent.queued and not agent.disposed:
                    agent.set_status("idle")
        finally:
            agent.mark_disposed()
            agent.settle_idle()
            self._instances.pop(agent.id, None)
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
        reason: dict[str, Any] | None = None
        try:
            reason = await self._submit_prompts(agent, batch)
            while reason is None:
                step += 1
                if step > self.max_steps:
                    reason = {
                        "kind": "error",
                        "step": step - 1,
                        "message": f"turn {turn} exceeded {self.max_steps} steps",
                        "code": "MAX_STEPS",
                    }
                    self._ctx.emit("agent/error", agent, turn, step - 1, TurnError(reason["message"], "MAX_STEPS"))
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
                    prefix = await self._ctx.waterfall(
                        "agent/session-prefix", agent, [], controller.signal, default=lambda: []
                    )
                    instance.prefix = _text(prefix or [])
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
                    reason = {"kind": "max-tokens"}
                drained = self._drain_steering(agent, turn)
                session.append("step/end", {"turn": turn, "step": step})
                step_open = False
                default = "continue" if (result.had_tool_calls or drained) else "stop"
                decision = await self._ctx.waterfall(
                    "agent/turn-continuation", agent, turn, default, default=lambda d=default: d
                )
                action, note = _decision(decision)
                if note:
                    agent.steering.append(QueuedMessage([{"type": "text", "text": note}], {"kind": "user"}))
                if agent.steering:
                    action = "continue"
                if action == "continue" and reason is None:
                    bail = await self._ctx.serial("agent/turn-stop", agent, turn)
                    if isinstance(bail, Mapping) and bail.get("action") == "stop":
                        terminal = True
                        agent.steering.clear()
                        action = "stop"
                stopped = self._stop_reason(agent)
                if stopped is not None:
                    reason = stopped
                elif action != "continue" and reason is None:
                    reason = {"kind": "completed"}
                elif reason is not None:
                    break
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
            content = message.content
            if isinstance(decision, Mapping) and decision.get("content") is not None:
                content = decision["content"]
            agent.session.append("user/message", {"content": content, "source": message.source}, surface_op="append")
            extra = decision.get("additionalContexts") if isinstance(decision, Mapping) else None
            for context in extra or ():
                agent.inject(context.get("content", []), source=context.get("source"))
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
        remove = controller.signal.add_listener(task.cancel)
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
            config: dict[str, Any] = {"model": agent.options.model or ""}
        else:
            config = dict(instance.last_header["config"])
        config = await self._ctx.waterfall("agent/request", agent, turn, step, config, default=lambda: config)
        if not config.get("model"):
            raise TurnError(
                f'agent "{agent.id}" has no model: set AgentOptions.model or supply one via the agent/request waterfall',
                "NO_MODEL",
            )
        header: dict[str, Any] = {"config": config}
        if system:
            header["system"] = system
        if tools:
            header["tools"] = tools
        prefix = instance.prefix or []
        if prefix:
            header["messagePrefix"] = prefix
        if instance.first_request:
            reason = "initial" if instance.last_header is None else "resume"
            session.append("request/header", {"header": header, "reason": reason})
            instance.last_header = session.events[-1].data["header"]
        elif not _same_header(header, instance.last_header):
            session.append("request/header", {"header": header, "reason": "change"})
            instance.last_header = session.events[-1].data["header"]
        instance.first_request = False

        messages: Sequence[dict[str, Any]] = [*prefix, *boundary] if prefix else boundary
        if self.dev_checks:
            _check_request_invariant(session, step_start, prefix, messages)
        request = LlmRequest(
            model=config["model"],
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
        chunk_seqs: list[int] = []
        append = session.append
        async for chunk in self._ctx.llm.stream(request):
            if signal.aborted:
                raise TurnError(str(signal.reason), "ABORTED")
            chunk_seqs.append(append("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk}).seq)
            assembler.push(chunk)
        finish: dict[str, Any] = dict(assembler.finish) if assembler.finished else {"kind": "stop"}
        if finish.get("kind") == "error":
            raise LlmError(str(finish.get("message", "model error")), str(finish.get("code") or "MODEL_ERROR"))
        if finish.get("kind") == "aborted":
            raise TurnError("model stream aborted", "ABORTED")
        max_tokens = finish.get("kind") == "max-tokens"
        content = [dict(b) for b in assembler.blocks()]
        if max_tokens:
            content = [b for b in content if b.get("type") != "tool-call"]
        message: dict[str, Any] = {"role": "assistant", "content": content}
        message = await self._ctx.waterfall("agent/step-result", agent, turn, step, message, default=lambda: message)
        content = list(message.get("content") or [])
        usage = assembler.usage
        if content or usage is not None:
            data: dict[str, Any] = {"turn": turn, "step": step, "content": content}
            if usage is not None:
                data["usage"] = usage
            append("assistant/message", data, surface_op="append", source_event_seqs=chunk_seqs or None)
        calls = [] if max_tokens else [b for b in content if b.get("type") == "tool-call"]
        contexts: list[Any] = []
        for call in calls:
            if signal.aborted:
                raise TurnError(str(signal.reason), "ABORTED")
            raw = call.get("arguments", "")
            call_event = append(
                "tool/call",
                {"turn": turn, "step": step, "callId": call["id"], "name": call["name"], "arguments": raw},
            )
            result = await self._ctx.tools.execute(
                call_id=call["id"], name=call["name"], arguments=_parse_arguments(raw), agent=agent, signal=signal
            )
            data = {
                "turn": turn,
                "step": step,
                "callId": call["id"],
                "content": list(result.content),
                "isError": bool(result.is_error),
            }
            if result.error is not None:
                data["error"] = dict(result.error)
            if result.meta is not None:
                data["meta"] = result.meta
            append("tool/result", data, surface_op="append", source_event_seqs=[call_event.seq])
            contexts.extend(result.additional_contexts or ())
            if signal.aborted:
                raise TurnError(str(signal.reason), "ABORTED")
        for context in contexts:
            agent.inject(context.get("content", []), source=context.get("source"))
        return StepResult(bool(calls), finish)


def _parse_arguments(raw: str) -> Any:
    if raw == "":
        return {}
    try:
        return json.loads(raw)
    except ValueError:
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


def _same_header(header: dict[str, Any], last: dict[str, Any] | None) -> bool:
    if last is None:
        return False
    return (
        header.get("config") == last.get("config")
        and header.get("system") == last.get("system")
        and json.dumps(header.get("tools"), sort_keys=False) == json.dumps(last.get("tools"), sort_keys=False)
        and json.dumps(header.get("messagePrefix")) == json.dumps(last.get("messagePrefix"))
    )


def _check_request_invariant(
    session: Session, step_start: Event, prefix: Sequence[Any], messages: Sequence[Any]
) -> None:
    expected = [*prefix, *derive_messages(session.events[: step_start.seq])]
    if list(messages) != expected:
        raise InvariantError(
            f"request for session {session.id} at seq {step_start.seq} differs from the log-derived history"
        )


async def apply(ctx: Context, config: Config) -> None:
    loop = AgentLoop(ctx, config)
    ctx.provide("agent_loop", loop)
    ctx.defer(loop.dispose)
    for entry in config.agents:
        if entry.resume_session_id:
            await loop.resume(entry.id, entry.resume_session_id, model=entry.model)
        else:
            loop.create(entry.id, model=entry.model, cwd=entry.cwd or os.getcwd())
