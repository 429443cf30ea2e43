"""One model step: the request header, the request, and the streamed answer.

Owns :class:`StepContext` (what a step knows: agent, turn, step, system prompt, tool schemas,
the derived history, its ``step/start`` and its abort controller) and :class:`StepRunner`, which
logs ``request/header`` when it changes, sends the request, logs every ``assistant/chunk`` and
the ``assistant/message``, then hands the tool calls to :mod:`dsh.agent.tool_exec`.

Why a step runs in a child task (:func:`dsh.runtime.run_cancellable`): cancellation must
interrupt a stream or a tool that is not watching its signal, and cancelling one child task per
step is cheaper than racing every chunk. A running tool first gets ``toolAbortGraceMs`` to honour
its signal and report its own result.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from dsh import _json
from dsh.agent.hooks import AGENT_ERROR, REQUEST, STEP_RESULT, AgentError, RequestConfig, StepResult
from dsh.agent.invariant import ShadowFold, check_request
from dsh.agent.sessions import SESSIONS
from dsh.agent.step_context import StepContext, StepOutcome, StepSettings
from dsh.agent.tool_exec import execute_calls
from dsh.agent.turns import TurnError
from dsh.llm.assembler import ChunkAssembler
from dsh.llm.service import LLM
from dsh.llm.types import LlmRequest
from dsh.runtime import Context, run_cancellable
from dsh.session.vocab import AssistantMessageData, ContentBlock, JsonObject, ToolCallBlock

log = logging.getLogger("dsh.agent")

JsonMap = Mapping[str, object]


class StepRunner:
    """Runs steps for one agent loop (see the module docstring)."""

    def __init__(self, ctx: Context, settings: StepSettings) -> None:
        self.ctx = ctx
        self.settings = settings

    async def run(self, sc: StepContext) -> StepOutcome:
        """Run the step in its own task; an abort cancels it (after the tool grace, in a tool)
        and ends it with :class:`TurnError` ``ABORTED``."""
        state, signal = sc.state, sc.signal
        grace = self.settings.tool_abort_grace

        def set_task(task: object) -> None:
            state.step_task = task

        try:
            return await run_cancellable(
                self._run(sc),
                signal,
                lambda: TurnError(str(signal.reason), "ABORTED"),
                grace=lambda: grace if state.in_tool else 0.0,
                started=set_task,
            )
        finally:
            state.step_task = None

    async def checkpoint(self, sc: StepContext) -> None:
        """Write buffered events (no fsync); a failure is reported, never raised."""
        try:
            await self.ctx.require(SESSIONS).checkpoint(sc.agent.session)
        except Exception as exc:
            agent = sc.agent
            log.warning('agent "%s": checkpoint failed in turn %s step %s: %s', agent.id, sc.turn, sc.step, exc)
            self.ctx.emit(AGENT_ERROR, AgentError(agent, sc.turn, sc.step, exc))

    async def _run(self, sc: StepContext) -> StepOutcome:
        agent, state, turn, step, signal = sc.agent, sc.state, sc.turn, sc.step, sc.signal
        config = await self._request_config(sc)
        model = config.get("model")
        if not isinstance(model, str) or not model:
            raise TurnError(
                f'agent "{agent.id}" has no model: set AgentOptions.model or supply one via the agent/request waterfall'
            )
        prefix = state.prefix or []
        self._log_header(sc, config, prefix)
        messages: Sequence[object] = [*prefix, *sc.boundary] if prefix else sc.boundary
        if self.settings.dev_checks:
            if state.shadow is None:
                state.shadow = ShadowFold()
            check_request(state.shadow, agent.session, sc.step_start, prefix, messages)
        if self.settings.checkpoint_before_model:
            # A model call can take minutes: write the prompt, the readings and step/start first,
            # so a process killed mid-call leaves a turn that repair closes instead of losing it.
            await self.checkpoint(sc)
        request = LlmRequest(
            model=model,
            messages=messages,  # type: ignore[arg-type]  # the prefix is the plugins' JSON
            system=sc.system or None,
            tools=sc.tools,
            temperature=config.get("temperature"),  # type: ignore[arg-type]
            max_tokens=config.get("maxTokens"),  # type: ignore[arg-type]
            stop=config.get("stop"),  # type: ignore[arg-type]
            session_id=agent.session.id,
            signal=signal,
        )
        assembler, chunk_seqs = await self._stream(sc, request)
        finish: JsonObject = dict(assembler.finish)
        kind = finish.get("kind")
        if kind == "error":
            code = finish.get("code")
            raise TurnError(str(finish.get("message") or "model error"), code if isinstance(code, str) else None)
        if kind == "aborted":
            raise TurnError("model stream aborted", "ABORTED")
        max_tokens = kind == "max-tokens"
        content: list[ContentBlock] = [dict(b) for b in assembler.blocks()]  # type: ignore[misc]
        if max_tokens:
            content = [b for b in content if b["type"] != "tool-call"]
        message: JsonMap = {"role": "assistant", "content": content}
        message = await self.ctx.waterfall(
            STEP_RESULT, StepResult(agent, turn, step, message), default=lambda: message
        )
        content = list(message.get("content") or [])  # type: ignore[call-overload]
        usage = assembler.usage
        if content or usage is not None:
            data: AssistantMessageData = {"turn": turn, "step": step, "content": content}
            if usage is not None:
                data["usage"] = dict(usage)
            agent.session.append("assistant/message", data, surface_op="append", source_event_seqs=chunk_seqs or None)
        calls: list[ToolCallBlock] = [] if max_tokens else [b for b in content if b.get("type") == "tool-call"]  # type: ignore[misc]
        if calls:
            await execute_calls(self.ctx, sc, calls, self.checkpoint if self.settings.checkpoint_before_tools else None)
        return StepOutcome(bool(calls), finish)

    async def _request_config(self, sc: StepContext) -> JsonObject:
        state = sc.state
        if state.first_request or state.last_header is None:
            seed: JsonMap = {"model": sc.agent.options.model or ""}
        else:
            seed = dict(state.last_header["config"])  # type: ignore[call-overload]
        config = await self.ctx.waterfall(
            REQUEST, RequestConfig(sc.agent, sc.turn, sc.step, seed), default=lambda: seed
        )
        return dict(config) if isinstance(config, Mapping) else {}

    def _log_header(self, sc: StepContext, config: JsonObject, prefix: list[JsonObject]) -> None:
        """``request/header`` on the first request (``initial``/``resume``) and on change."""
        state = sc.state
        header: JsonObject = {"config": config}
        if sc.system:
            header["system"] = sc.system
        if sc.tools:
            header["tools"] = sc.tools
        if prefix:
            header["messagePrefix"] = prefix
        key = header_key(header)
        if state.first_request:
            reason = "initial" if state.last_header is None else "resume"
        elif key != state.last_header_key:
            reason = "change"
        else:
            return
        state.first_request = False
        logged = sc.agent.session.append("request/header", {"header": header, "reason": reason})
        state.last_header, state.last_header_key = logged.data["header"], key

    async def _stream(self, sc: StepContext, request: LlmRequest) -> tuple[ChunkAssembler, list[int]]:
        signal, turn, step = sc.signal, sc.turn, sc.step
        assembler = ChunkAssembler()
        push = assembler.push
        chunk_seqs: list[int] = []
        append = sc.agent.session.append
        stream = self.ctx.require(LLM).stream(request)
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
        return assembler, chunk_seqs


def header_key(header: JsonMap) -> tuple[object, ...]:
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
