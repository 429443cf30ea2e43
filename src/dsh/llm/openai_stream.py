"""Chat-completions stream chunks → dsh stream chunks (docs/llm.md), for the ``openai-llm`` adapter.

Owns :class:`Translator`: ``reasoning_content`` → a reasoning block (an empty string opens none),
``content`` → a text block, each wire tool-call index → its own tool-call block, dsh block
indexes in first-seen order; deltas as they arrive, ``block-end``s, ``usage`` and ``finish``
deferred to the end. Also the finish-reason and usage mappings. Reads SDK models and plain
mappings alike, so it needs no SDK import.
"""

from __future__ import annotations

from collections.abc import Callable

from dsh.llm._wire import field as _get
from dsh.llm._wire import integer as _int
from dsh.llm._wire import unknown_finish
from dsh.llm.types import (
    BlockEndChunk,
    BlockType,
    ContentBlock,
    FinishReason,
    LlmError,
    StreamChunk,
    TokenUsage,
)

__all__ = ["Translator", "map_finish_reason", "map_usage"]


def map_finish_reason(reason: str) -> FinishReason:
    """Wire ``finish_reason`` → dsh finish reason (unknown values become ``error``)."""
    if reason == "stop":
        return {"kind": "stop"}
    if reason == "tool_calls":
        return {"kind": "tool-calls"}
    if reason == "length":
        return {"kind": "max-tokens"}
    return unknown_finish(reason)


def map_usage(usage: object) -> TokenUsage:
    """Wire usage → disjoint dsh usage (``inputTokens`` excludes cache hits)."""
    prompt = _int(_get(usage, "prompt_tokens")) or 0
    completion = _int(_get(usage, "completion_tokens")) or 0
    cached = _int(_get(_get(usage, "prompt_tokens_details"), "cached_tokens"))
    if cached is None:
        cached = _int(_get(usage, "prompt_cache_hit_tokens"))
    reasoning = _int(_get(_get(usage, "completion_tokens_details"), "reasoning_tokens"))
    mapped: TokenUsage = {"inputTokens": prompt - (cached or 0), "outputTokens": completion}
    if cached is not None:
        mapped["cacheReadTokens"] = cached
    if reasoning is not None:
        mapped["reasoningTokens"] = reasoning
    return mapped


class _Open:
    """One dsh block under construction."""

    __slots__ = ("call_id", "index", "kind", "name", "parts")

    def __init__(self, index: int, kind: BlockType) -> None:
        self.index = index
        self.kind = kind
        self.parts: list[str] = []
        self.call_id: str | None = None
        self.name: str | None = None

    def close(self) -> BlockEndChunk:
        text = "".join(self.parts)
        block: ContentBlock
        if self.kind == "text":
            block = {"type": "text", "text": text}
        elif self.kind == "reasoning":
            block = {"type": "reasoning", "text": text}
        else:
            block = {
                "type": "tool-call",
                "id": self.call_id or f"call-{self.index}",
                "name": self.name or "",
                "arguments": text,
            }
        return {"type": "block-end", "index": self.index, "block": block}


class Translator:
    """Wire chunks → dsh chunks, emitted through ``emit`` as they are produced."""

    __slots__ = ("blocks", "emit", "finish", "single", "tools", "usage")

    def __init__(self, emit: Callable[[StreamChunk], None]) -> None:
        self.emit = emit
        self.blocks: list[_Open] = []
        # The one text block and the one reasoning block of a reply, once opened.
        self.single: dict[BlockType, _Open] = {}
        self.tools: dict[int, _Open] = {}
        self.finish: FinishReason | None = None
        self.usage: TokenUsage | None = None

    def _open(self, kind: BlockType) -> _Open:
        block = _Open(len(self.blocks), kind)
        self.blocks.append(block)
        self.emit({"type": "block-start", "index": block.index, "blockType": kind})
        return block

    def feed(self, chunk: object) -> None:
        choices = _get(chunk, "choices") or ()
        if not isinstance(choices, list | tuple):
            raise LlmError("malformed chunk: choices is not a list", code="MALFORMED_RESPONSE")
        for choice in choices:
            delta = _get(choice, "delta")
            if delta is not None:
                reasoning = _get(delta, "reasoning_content")
                if isinstance(reasoning, str) and reasoning:
                    block = self._append("reasoning", reasoning)
                    self.emit({"type": "reasoning-delta", "index": block.index, "text": reasoning})
                content = _get(delta, "content")
                if isinstance(content, str) and content:
                    block = self._append("text", content)
                    self.emit({"type": "text-delta", "index": block.index, "text": content})
                calls = _get(delta, "tool_calls")
                if calls:
                    if not isinstance(calls, list | tuple):
                        raise LlmError(
                            "malformed chunk: tool_calls is not a list", code="MALFORMED_RESPONSE"
                        )
                    for position, call in enumerate(calls):
                        self._tool_delta(position, call)
            reason = _get(choice, "finish_reason")
            if isinstance(reason, str) and reason:
                self.finish = map_finish_reason(reason)
        usage = _get(chunk, "usage")
        if usage is not None:
            self.usage = map_usage(usage)

    def _append(self, kind: BlockType, text: str) -> _Open:
        """Add ``text`` to the reply's block of ``kind``, opening it on first use."""
        block = self.single.get(kind)
        if block is None:
            block = self.single[kind] = self._open(kind)
        block.parts.append(text)
        return block

    def _tool_delta(self, position: int, call: object) -> None:
        wire_index = _int(_get(call, "index"))
        if wire_index is None:
            wire_index = position
        block = self.tools.get(wire_index)
        if block is None:
            block = self.tools[wire_index] = self._open("tool-call")
        call_id = _get(call, "id")
        if isinstance(call_id, str) and call_id:
            block.call_id = call_id
        function = _get(call, "function")
        name = _get(function, "name")
        if isinstance(name, str) and name:
            block.name = name
        fragment = _get(function, "arguments")
        if not isinstance(fragment, str):
            fragment = ""
        if fragment:
            block.parts.append(fragment)
        if block.name is not None:
            self.emit(
                {
                    "type": "tool-call-delta",
                    "index": block.index,
                    "id": block.call_id or "",
                    "name": block.name,
                    "argumentsDelta": fragment,
                }
            )
        else:
            self.emit(
                {
                    "type": "tool-call-delta",
                    "index": block.index,
                    "id": block.call_id or "",
                    "argumentsDelta": fragment,
                }
            )

    def end(self) -> None:
        """The wire stream ended cleanly: emit the deferred block-ends, usage and finish."""
        if self.finish is None:
            raise LlmError(
                "the model stream ended before a finish reason was received",
                code="STREAM_CLOSED",
            )
        for block in self.blocks:
            self.emit(block.close())
        if self.usage is not None:
            self.emit({"type": "usage", "usage": self.usage})
        self.emit({"type": "finish", "reason": self.finish})
