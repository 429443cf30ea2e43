"""dsh requests → chat-completions wire requests (docs/llm.md), for the ``openai-llm`` adapter.

Owns the mapping of messages and tools to the wire: ``system`` first; a user message's text
blocks concatenated with no separator; each ``tool-result`` as its own ``{role:'tool',
tool_call_id, content}`` (``(no output)`` when empty); assistant tool calls as ``tool_calls``
with ``reasoning_content`` only on tool-call turns; tools as functions; ``stream_options:
{include_usage: true}``; ``thinking``/``reasoning_effort``/``extraBody`` through the SDK's
``extra_body``. Pure data: no SDK import.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dsh.llm.providers import wire_model
from dsh.llm.types import LlmRequest
from dsh.session.vocab import JsonObject

__all__ = ["NO_OUTPUT", "build_messages", "build_tools", "request_kwargs"]

NO_OUTPUT = "(no output)"

# Messages and tools arrive as LlmRequest declares them (``Mapping[str, Any]``): the same dicts
# Session.derive_messages() returns, read leniently.
_Wire = Mapping[str, Any]


def _text_of(blocks: Iterable[_Wire] | None) -> str:
    """The text blocks of ``blocks`` joined with no separator."""
    if not blocks:
        return ""
    return "".join(
        b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)
    )


def _assistant_to_wire(content: Iterable[_Wire]) -> JsonObject:
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[JsonObject] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            text.append(block["text"])
        elif kind == "reasoning":
            reasoning.append(block["text"])
        elif kind == "tool-call":
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": block["arguments"]},
                }
            )
    # Text-less turns send "" rather than null: some endpoints reject a null-content assistant
    # message without tool calls (a reasoning-only turn), which would poison the session.
    wire: JsonObject = {"role": "assistant", "content": "".join(text)}
    if calls:
        joined = "".join(reasoning)
        if joined:  # thinking-mode passback: required on tool-call turns, ignored elsewhere
            wire["reasoning_content"] = joined
        wire["tool_calls"] = calls
    return wire


def build_messages(system: str | None, messages: Sequence[_Wire]) -> list[JsonObject]:
    """Map dsh messages (plus the system prompt) to chat-completions wire messages."""
    wire: list[JsonObject] = []
    if system is not None:
        wire.append({"role": "system", "content": system})
    for message in messages:
        role = message.get("role")
        content: Sequence[_Wire] = message.get("content") or ()
        if role == "assistant":
            wire.append(_assistant_to_wire(content))
        elif role == "system":
            wire.append({"role": "system", "content": _text_of(content)})
        else:
            results = [b for b in content if b.get("type") == "tool-result"]
            text = _text_of(content)
            if text or not results:
                wire.append({"role": "user", "content": text})
            for result in results:
                wire.append(
                    {
                        "role": "tool",
                        "tool_call_id": result["toolCallId"],
                        "content": _text_of(result.get("content")) or NO_OUTPUT,
                    }
                )
    return wire


def build_tools(tools: Sequence[_Wire]) -> list[JsonObject]:
    """Map ``{name, description, parameters}`` tools to chat-completions function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool.get("description", ""),
                "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
            },
        }
        for tool in tools
    ]


def request_kwargs(request: LlmRequest, extra_body: Mapping[str, object]) -> JsonObject:
    """The SDK ``chat.completions.create`` keyword arguments for ``request``."""
    kwargs: JsonObject = {
        # "deepseek:deepseek-chat" routes here; the API knows it as "deepseek-chat".
        "model": wire_model(request.model),
        "messages": build_messages(request.system, request.messages),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        kwargs["tools"] = build_tools(request.tools)
    if request.temperature is not None:
        kwargs["temperature"] = request.temperature
    if request.max_tokens is not None:
        kwargs["max_tokens"] = request.max_tokens
    if request.stop is not None:
        kwargs["stop"] = list(request.stop)
    if extra_body:
        kwargs["extra_body"] = dict(extra_body)
    return kwargs
