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
from dsh.tools.types import ToolResult


async def execute_calls(
    ctx: Context,
    sc: StepContext,
    calls: list[ToolCallBlock],
    checkpoint: Callable[[StepContext], Awaitable[None]] | None,
) -> None:
    """Run ``calls`` in order; ``checkpoint`` (when set) runs before each tool starts.

    A run of consecutive calls to concurrency-safe tools (``Tool.concurrency_safe``, e.g.
    ``subagent``) starts together: their ``tool/call`` events are logged, the checkpoint runs
    once, the calls overlap, and their results are committed in the model's order.
    """
    agent, signal = sc.agent, sc.signal
    registry = ctx.require(TOOLS)
    contexts: list[object] = []

    def overlaps(call: ToolCallBlock) -> bool:
        tool = registry.get(str(call.get("name")), agent_id=agent.id)
        return tool is not None and tool.concurrency_safe

    index = 0
    while index < len(calls):
        batch = [calls[index]]
        if overlaps(calls[index]):
            while index + len(batch) < len(calls) and overlaps(calls[index + len(batch)]):
                batch.append(calls[index + len(batch)])
        index += len(batch)
        if signal.aborted:
            raise TurnError(str(signal.reason), "ABORTED")
        contexts.extend(await _run_batch(ctx, sc, batch, checkpoint))
        if signal.aborted:
            raise TurnError(str(signal.reason), "ABORTED")
    for context in contexts:
        inject_context(agent, context)


async def _run_batch(
    ctx: Context,
    sc: StepContext,
    batch: list[ToolCallBlock],
    checkpoint: Callable[[StepContext], Awaitable[None]] | None,
) -> list[object]:
    agent, state, turn, step, signal = sc.agent, sc.state, sc.turn, sc.step, sc.signal
    append = agent.session.append
    execute = ctx.require(TOOLS).execute
    logged: list[tuple[ToolCallBlock, list[int]]] = []
    for call in batch:
        call_event = append(
            "tool/call",
            {"turn": turn, "step": step, "callId": call.get("id"), "name": call.get("name"),
             "arguments": call.get("arguments", "")},
        )
        logged.append((call, [call_event.seq]))
    if checkpoint is not None:
        # A tool can run for minutes and act on the world: the assistant message and the
        # calls reach the disk before they start, so a process killed mid-tool leaves calls
        # that repair closes with the synthetic result, and the model learns they may have run.
        await checkpoint(sc)

    def run(call: ToolCallBlock) -> Awaitable[ToolResult]:
        return execute(
            call_id=call.get("id"),
            name=call.get("name"),
            arguments=parse_arguments(call.get("arguments", "")),
            agent=agent,
            signal=signal,
            agent_id=agent.id,
            allowed=agent.options.tools,
        )

    done: list[ToolResult] = []
    state.in_tool = True
    try:
        if len(batch) == 1:
            done.append(await run(batch[0]))
        else:
            done.extend(await asyncio.gather(*(run(call) for call, _ in logged)))
    except asyncio.CancelledError:
        if not signal.aborted:
            raise
        # The step was aborted while the tools ran: record the outcome a tool honouring
        # its signal would have reported, for every call of the batch.
        text = f"Error: {signal.reason}"
        for call, sources in logged:
            append(
                "tool/result", tool_error_result(turn, step, call.get("id"), text),
                surface_op="append", source_event_seqs=sources,
            )
        raise TurnError(str(signal.reason), "ABORTED") from None
    finally:
        state.in_tool = False
    contexts: list[object] = []
    for (call, sources), result in zip(logged, done, strict=True):
        _record(agent, turn, step, call, sources, result)
        contexts.extend(result.additional_contexts or ())
    return contexts


def _record(agent: Agent, turn: int, step: int, call: ToolCallBlock, sources: list[int], result: ToolResult) -> None:
    append = agent.session.append
    call_id, tool_name = call.get("id"), call.get("name")
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
