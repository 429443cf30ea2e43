"""dsh requests → Messages API requests, and where the prompt-cache breakpoints go.

Owns :func:`wire_request` (``system``, ``tools``, ``messages`` exactly as sent, cache marks
included) and :func:`request_params` (plus ``model``, ``max_tokens``, ``thinking``, ``stream``).
Pure data, no SDK import: ``dsh sessions requests`` rebuilds a logged request with the same
function the adapter sends it with.

The mapping: consecutive messages of one role merge into one wire message (tool results first
in a user message, as the API requires); text blocks (empty ones dropped), ``tool-call`` →
``tool_use`` (``input`` parsed from the arguments), ``tool-result`` → ``tool_result``;
``reasoning`` with a ``signature`` → ``thinking`` (text and signature unchanged),
``redacted: true`` → ``redacted_thinking`` (``data`` = the signature). A reasoning block without a
signature came from another provider: Anthropic would reject it, so it is not sent (the log
keeps it).

The cache rule (:func:`breakpoints`): at most :data:`MAX_BREAKPOINTS` ``cache_control`` marks,
on (1) the last tool, (2) the system prompt, (3) the last block of the messages before the
request's last assistant message (the whole previous request: dsh's log is append-only, so it
is this request's prefix and was written to the cache by that request's mark 4), and (4) the
last block of the request (written now for the next request). Thinking blocks cannot carry a
mark, so a mark that would fall on one is left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from dsh.llm.providers import wire_model
from dsh.llm.types import LlmRequest
from dsh.session.vocab import JsonObject

__all__ = [
    "CACHE",
    "MAX_BREAKPOINTS",
    "NO_OUTPUT",
    "breakpoints",
    "marked_messages",
    "request_params",
    "wire_request",
]

CACHE: JsonObject = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4  # the API's limit per request
NO_OUTPUT = "(no output)"
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})

_Wire = Mapping[str, Any]


def _text_blocks(blocks: Sequence[_Wire] | None) -> list[JsonObject]:
    return [
        {"type": "text", "text": b["text"]}
        for b in blocks or ()
        if b.get("type") == "text" and isinstance(b.get("text"), str) and b["text"]
    ]


def _tool_input(arguments: object) -> object:
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _assistant_blocks(content: Sequence[_Wire]) -> list[JsonObject]:
    out: list[JsonObject] = []
    for block in content:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            out.append({"type": "text", "text": block["text"]})
        elif kind == "reasoning" and isinstance(block.get("signature"), str):
            if block.get("redacted"):
                out.append({"type": "redacted_thinking", "data": block["signature"]})
            else:
                out.append(
                    {"type": "thinking", "thinking": block.get("text", ""), "signature": block["signature"]}
                )
        elif kind == "tool-call":
            out.append(
                {
                    "type": "tool_use",
                    "id": block["id"],
                    "name": block["name"],
                    "input": _tool_input(block.get("arguments")),
                }
            )
    return out


def _user_blocks(content: Sequence[_Wire]) -> list[JsonObject]:
    results: list[JsonObject] = []
    rest: list[JsonObject] = []
    for block in content:
        kind = block.get("type")
        if kind == "tool-result":
            texts = _text_blocks(block.get("content"))
            result: JsonObject = {
                "type": "tool_result",
                "tool_use_id": block["toolCallId"],
                "content": texts or [{"type": "text", "text": NO_OUTPUT}],
            }
            if block.get("isError"):
                result["is_error"] = True
            results.append(result)
        elif kind == "text" and isinstance(block.get("text"), str) and block["text"]:
            rest.append({"type": "text", "text": block["text"]})
    return results + rest


def _messages(messages: Sequence[_Wire]) -> tuple[list[JsonObject], list[tuple[int, int] | None]]:
    """The wire messages, and for each dsh message where its last block landed (or ``None``)."""
    wire: list[JsonObject] = []
    ends: list[tuple[int, int] | None] = []
    for message in messages:
        role = "assistant" if message.get("role") == "assistant" else "user"
        content: Sequence[_Wire] = message.get("content") or ()
        blocks = _assistant_blocks(content) if role == "assistant" else _user_blocks(content)
        if not blocks:
            ends.append(None)
            continue
        if wire and wire[-1]["role"] == role:
            merged: list[JsonObject] = wire[-1]["content"]  # type: ignore[assignment]
            if role == "user" and any(b["type"] == "tool_result" for b in blocks):
                # tool results lead a user message; keep the earlier results' order
                lead = [b for b in merged if b["type"] == "tool_result"]
                tail = [b for b in merged if b["type"] != "tool_result"]
                merged[:] = lead + [b for b in blocks if b["type"] == "tool_result"] + tail + [
                    b for b in blocks if b["type"] != "tool_result"
                ]
            else:
                merged.extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
        last = wire[-1]["content"]
        ends.append((len(wire) - 1, len(last) - 1))  # type: ignore[arg-type]
    return wire, ends


def breakpoints(messages: Sequence[_Wire], ends: Sequence[tuple[int, int] | None]) -> list[tuple[int, int]]:
    """The (wire message, block) positions of marks 3 and 4 of the cache rule."""
    marks: list[tuple[int, int]] = []
    last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    if last_assistant is not None:
        previous = next((ends[i] for i in range(last_assistant - 1, -1, -1) if ends[i] is not None), None)
        if previous is not None:
            marks.append(previous)
    final = next((e for e in reversed(ends) if e is not None), None)
    if final is not None and final not in marks:
        marks.append(final)
    return marks


def wire_request(request: LlmRequest, cache: bool = True) -> JsonObject:
    """``system``, ``tools`` and ``messages`` of the Messages API request, cache marks placed."""
    out: JsonObject = {}
    budget = MAX_BREAKPOINTS
    if request.tools:
        tools: list[JsonObject] = [
            {
                "name": tool["name"],
                "description": tool.get("description", ""),
                "input_schema": tool.get("parameters") or {"type": "object", "properties": {}},
            }
            for tool in request.tools
        ]
        if cache:
            tools[-1]["cache_control"] = dict(CACHE)
            budget -= 1
        out["tools"] = tools
    if request.system:
        system: JsonObject = {"type": "text", "text": request.system}
        if cache:
            system["cache_control"] = dict(CACHE)
            budget -= 1
        out["system"] = [system]
    messages, ends = _messages(request.messages)
    if cache:
        for index, block_index in _marks(messages, request.messages, ends, budget):
            messages[index]["content"][block_index]["cache_control"] = dict(CACHE)  # type: ignore[index]
    out["messages"] = messages
    return out


def _marks(
    wire: list[JsonObject], messages: Sequence[_Wire], ends: Sequence[tuple[int, int] | None], budget: int
) -> list[tuple[int, int]]:
    return [
        (index, block)
        for index, block in breakpoints(messages, ends)[:budget]
        if wire[index]["content"][block]["type"] not in _UNMARKABLE  # type: ignore[index]
    ]


def marked_messages(request: LlmRequest) -> set[int]:
    """Indexes of ``request.messages`` whose last wire block carries a cache mark."""
    budget = MAX_BREAKPOINTS - bool(request.tools) - bool(request.system)
    wire, ends = _messages(request.messages)
    marks = set(_marks(wire, request.messages, ends, budget))
    return {i for i, end in enumerate(ends) if end is not None and end in marks}


def request_params(
    request: LlmRequest,
    *,
    max_tokens: int,
    thinking_budget: int | None,
    cache: bool = True,
) -> JsonObject:
    """The SDK ``messages.create`` keyword arguments (``thinking_budget`` ``None``: no thinking)."""
    params: JsonObject = {"model": wire_model(request.model), "max_tokens": max_tokens}
    params.update(wire_request(request, cache))
    if thinking_budget is not None:
        params["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
    elif request.temperature is not None:  # thinking allows no temperature but the default
        params["temperature"] = request.temperature
    if request.stop:
        params["stop_sequences"] = list(request.stop)
    params["stream"] = True
    return params
