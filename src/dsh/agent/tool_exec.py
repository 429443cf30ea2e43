"""Tool execution within a step: ``tool/call``, the call, ``tool/result``, in call order.

Owns the pairing guarantee: every logged ``tool/call`` gets a ``tool/result``, including a call
cut off by an abort (``Error: <reason>``, ``isError``) and a result the log cannot hold
(``INVALID_TOOL_RESULT``). Contexts a tool asks for are injected after all results of the step.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping

from dsh.agent.agent import Agent
from dsh.agent.step_context import StepContext
from dsh.agent.turns import TurnError
from dsh.runtime import Context
from dsh.session.vocab import ToolCallBlock, ToolErrorInfo, ToolResultData, tool_error_result
from dsh.tools.registry import TOOLS


async def execute_calls(
    ctx: Context,
    sc: StepContext,
    calls: list[ToolCallBlock],
    checkpoint: Callable[[StepContext], Awaitable[None]] | None,
) -> None:
    """Run ``calls`` in order; ``checkpoint`` (when set) runs before each tool starts."""
    agent, state, turn, step, signal = sc.agent, sc.state, sc.turn, sc.step, sc.signal
    append = agent.session.append
    execute = ctx.require(TOOLS).execute
    contexts: list[object] = []
    for call in calls:
        if signal.aborted:
            raise TurnError(str(signal.reason), "ABORTED")
        call_id, tool_name = call.get("id"), call.get("name")
        raw = call.get("arguments", "")
        call_event = append(
            "tool/call", {"turn": turn, "step": step, "callId": call_id, "name": tool_name, "arguments": raw}
        )
        sources = [call_event.seq]
        if checkpoint is not None:
            # A tool can run for minutes and act on the world: the assistant message and this
            # call reach the disk before it starts, so a process killed mid-tool leaves a call
            # that repair closes with the synthetic result, and the model learns it may have run.
            await checkpoint(sc)
        state.in_tool = True
        try:
            result = await execute(
                call_id=call_id,
                name=tool_name,
                arguments=parse_arguments(raw),
                agent=agent,
                signal=signal,
                agent_id=agent.id,
            )
        except asyncio.CancelledError:
            if not signal.aborted:
                raise
            # The step was aborted while the tool ran: record the outcome a tool honouring
            # its signal would have reported.
            text = f"Error: {signal.reason}"
            append("tool/result", tool_error_result(turn, step, call_id, text), surface_op="append", source_event_seqs=sources)
            raise TurnError(str(signal.reason), "ABORTED") from None
        finally:
            state.in_tool = False
        data: ToolResultData = {
            "turn": turn,
            "step": step,
            "callId": call_id,
            "content": list(result.content),
            "isError": bool(result.is_error),
        }
        if result.error is not None:
            data["error"] = result.error
        if result.meta is not None:
            data["meta"] = result.meta
        try:
            append("tool/result", data, surface_op="append", source_event_seqs=sources)
        except (TypeError, ValueError) as exc:
            # The tool returned what the log cannot hold (not lossless JSON, say); the call
            # still gets its result, or providers reject the history from here on.
            text = f"Error: tool {tool_name} returned a result the session cannot record: {exc}"
            error: ToolErrorInfo = {"name": "InvalidToolResult", "code": "INVALID_TOOL_RESULT"}
            append(
                "tool/result",
                tool_error_result(turn, step, call_id, text, error),
                surface_op="append",
                source_event_seqs=sources,
            )
        contexts.extend(result.additional_contexts or ())
        if signal.aborted:
            raise TurnError(str(signal.reason), "ABORTED")
    for context in contexts:
        inject_context(agent, context)


def inject_context(agent: Agent, context: object) -> None:
    """Append one ``additionalContexts`` entry (``{content, source?, envelope?, meta?}``)."""
    if not isinstance(context, Mapping):
        raise TypeError("an additionalContexts entry must be a mapping with content")
    agent.inject(
        context.get("content") or [],
        source=context.get("source"),
        envelope=context.get("envelope"),
        meta=context.get("meta"),
    )


def parse_arguments(raw: str) -> object:
    if raw == "":
        return {}
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # invalid, or nested deeper than the parser goes
        return raw
