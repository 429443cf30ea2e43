"""One driver turn: prompts, the step loop, steering, continuation and the turn end.

Owns the exact append order of a turn (docs/agent-loop.md): ``turn/start``, the submitted
prompts, then per step the pre-step listeners, ``step/start``, the step
(:mod:`dsh.agent.step`) and ``step/end``; finally ``turn/end`` with its reason and a flush.
``maxStepsPerTurn`` caps the steps (past it the turn ends ``error`` with code ``MAX_STEPS``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial

from dsh.agent.agent import Agent, QueuedMessage, RunState, flush_turn
from dsh.agent.hooks import (
    AGENT_ERROR,
    PRE_STEP,
    PROMPT_SUBMIT,
    SESSION_PREFIX,
    TURN_CONTINUATION,
    TURN_END,
    TURN_STOP,
    AgentError,
    PreStep,
    PromptSubmit,
    SessionPrefix,
    TurnContinuation,
    TurnEnd,
    TurnStop,
)
from dsh.agent.step import StepRunner
from dsh.agent.step_context import StepContext
from dsh.agent.system_prompt import SYSTEM_PROMPT
from dsh.agent.tool_exec import inject_context
from dsh.agent.turns import TurnError, reason_for
from dsh.runtime import AbortController, AbortSignal, Context
from dsh.session.vocab import (
    COMPLETED,
    JsonObject,
    TurnEndReason,
    step_boundary,
    text_block,
    turn_end,
    turn_start,
)
from dsh.tools.registry import TOOLS

log = logging.getLogger("dsh.agent")


class TurnRunner:
    """Runs driver turns for one agent loop."""

    def __init__(self, ctx: Context, steps: StepRunner, max_steps: int) -> None:
        self.ctx = ctx
        self.steps = steps
        self.max_steps = max_steps

    async def run(self, agent: Agent, turn: int) -> bool:
        """Run one turn; returns whether it ended in a terminal stop (steering discarded)."""
        state = agent.run_state
        session = agent.session
        batch = list(state.queued)
        state.queued.clear()
        session.append("turn/start", turn_start(turn, "message", batch[0].source))
        step = 0
        step_open = False
        terminal = False
        hit_max_tokens = False
        reason: TurnEndReason | None = None
        try:
            reason = await self._submit_prompts(agent, batch)
            while reason is None:
                step += 1
                if step > self.max_steps:
                    step -= 1
                    error = TurnError(f"turn {turn} exceeded {self.max_steps} steps", "MAX_STEPS")
                    log.warning('agent "%s": %s', agent.id, error)
                    self.ctx.emit(AGENT_ERROR, AgentError(agent, turn, step, error))
                    reason = reason_for(step, error)
                    break
                self._drain_steering(agent, turn)
                controller = AbortController()
                state.step_controller = controller
                if state.cancel_reason is not None:
                    controller.abort(state.cancel_reason)
                system = self._render_system(agent)
                tools = self.ctx.require(TOOLS).schemas(agent_id=agent.id, allowed=agent.options.tools)
                reason = _stop_reason(state)
                if reason is not None:
                    break
                if state.prefix is None:
                    prefix: Sequence[Mapping[str, object]] | None = await self.ctx.waterfall(
                        SESSION_PREFIX, SessionPrefix(agent, [], controller.signal), default=list
                    )
                    state.prefix = [dict(message) for message in prefix or []]
                    reason = _stop_reason(state)
                    if reason is not None:
                        break
                await self.ctx.serial(
                    PRE_STEP, PreStep(agent, turn, step, system, state.prefix, controller.signal)
                )
                reason = _stop_reason(state)
                if reason is not None:
                    break
                boundary = session.derive_messages()
                step_start = session.append("step/start", step_boundary(turn, step))
                step_open = True
                reason = _stop_reason(state)
                if reason is not None:
                    step_open = False
                    session.append("step/end", step_boundary(turn, step))
                    break
                sc = StepContext(agent, state, turn, step, system, tools, boundary, step_start, controller)
                try:
                    result = await self.steps.run(sc)
                except Exception as exc:
                    step_open = False
                    session.append("step/end", step_boundary(turn, step))
                    reason = self._failure_reason(agent, controller.signal, turn, step, exc)
                    break
                if result.finish.get("kind") == "max-tokens":
                    hit_max_tokens = True
                drained = self._drain_steering(agent, turn)
                step_open = False
                session.append("step/end", step_boundary(turn, step))
                default = "continue" if (result.had_tool_calls or drained) else "stop"
                decision = await self.ctx.waterfall(
                    TURN_CONTINUATION, TurnContinuation(agent, turn, default), default=partial(_identity, default)
                )
                action, note = _decision(decision)
                if note:
                    state.steering.append(QueuedMessage([text_block(note)], {"kind": "user"}))
                if state.steering:
                    action = "continue"
                if action == "continue":
                    bail = await self.ctx.serial(TURN_STOP, TurnStop(agent, turn))
                    if bail is not None and bail is not False:
                        terminal = True
                        state.steering.clear()
                        action = "stop"
                reason = _stop_reason(state)
                if reason is None and action != "continue":
                    reason = {"kind": "max-tokens"} if hit_max_tokens else COMPLETED
        except Exception as exc:
            if step_open:
                session.append("step/end", step_boundary(turn, step))
            if agent.disposed:
                reason = {"kind": "disposed"}
            else:
                reason = reason_for(step, exc)
                log.warning('agent "%s": turn %s failed: %s', agent.id, turn, exc)
                self.ctx.emit(AGENT_ERROR, AgentError(agent, turn, step, exc))
        finally:
            state.step_controller = None
        await self._turn_end(agent, turn, step, reason)
        session.append("turn/end", turn_end(turn, reason))
        await flush_turn(self.ctx, agent, turn, step)
        return terminal

    async def _turn_end(self, agent: Agent, turn: int, step: int, reason: TurnEndReason | None) -> None:
        """``agent/turn-end`` listeners; a failing one is reported and the turn still ends."""
        try:
            await self.ctx.serial(TURN_END, TurnEnd(agent, turn, step, dict(reason or {})))
        except Exception as exc:
            log.warning('agent "%s": turn %s: a turn-end listener failed: %s', agent.id, turn, exc)
            self.ctx.emit(AGENT_ERROR, AgentError(agent, turn, step, exc))

    async def _submit_prompts(self, agent: Agent, batch: list[QueuedMessage]) -> TurnEndReason | None:
        allowed = 0
        last_block: str | None = None
        for message in batch:
            decision = await self.ctx.waterfall(
                PROMPT_SUBMIT, PromptSubmit(agent, message.content, message.source), default=_allow
            )
            if isinstance(decision, Mapping) and decision.get("kind") == "block":
                last_block = str(decision.get("reason", "blocked"))
                agent.session.append(
                    "prompt/blocked", {"content": message.content, "source": message.source, "reason": last_block}
                )
                continue
            allowed += 1
            content: object = message.content
            if isinstance(decision, Mapping) and decision.get("content") is not None:
                content = decision["content"]
            agent.session.append("user/message", {"content": content, "source": message.source}, surface_op="append")
            extra = decision.get("additionalContexts") if isinstance(decision, Mapping) else None
            for context in extra or ():  # type: ignore[attr-defined]
                inject_context(agent, context)
        if allowed == 0:
            return {"kind": "rejected", "reason": last_block or "blocked"}
        return None

    def _drain_steering(self, agent: Agent, turn: int) -> bool:
        drained = False
        steering = agent.run_state.steering
        while steering:
            message = steering.popleft()
            agent.session.append(
                "steering/message", {"turn": turn, "content": message.content, "source": message.source},
                surface_op="append",
            )
            drained = True
        return drained

    def _failure_reason(
        self, agent: Agent, signal: AbortSignal, turn: int, step: int, exc: BaseException
    ) -> TurnEndReason:
        if agent.disposed:
            return {"kind": "disposed"}
        if signal.aborted:
            return {"kind": "aborted", "reason": str(signal.reason)}
        log.warning('agent "%s": turn %s step %s failed: %s', agent.id, turn, step, exc)
        self.ctx.emit(AGENT_ERROR, AgentError(agent, turn, step, exc))
        return reason_for(step, exc)

    def _render_system(self, agent: Agent) -> str:
        if agent.options.system is not None:
            return agent.options.system
        variables = {"model": agent.options.model, "cwd": agent.session.header.get("cwd")}
        return self.ctx.require(SYSTEM_PROMPT).render(variables)


def _identity(value: object) -> object:
    return value


def _allow() -> JsonObject:
    return {"kind": "allow"}


def _stop_reason(state: RunState) -> TurnEndReason | None:
    if state.status == "disposed":
        return {"kind": "disposed"}
    if state.cancel_reason is not None:
        return {"kind": "aborted", "reason": state.cancel_reason}
    return None


def _decision(decision: object) -> tuple[str, str | None]:
    if isinstance(decision, str):
        return decision, None
    if isinstance(decision, Mapping):
        action = decision.get("action") or decision.get("kind") or "stop"
        note = decision.get("reason")
        return str(action), (str(note) if action == "continue" and note else None)
    return "stop", None
