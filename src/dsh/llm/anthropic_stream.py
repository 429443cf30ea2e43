"""Messages API stream events → dsh stream chunks, for the ``anthropic-llm`` adapter.

Owns :class:`Translator` over Anthropic's documented event stream: ``message_start`` (usage),
``content_block_start``/``content_block_delta``/``content_block_stop`` (``text_delta``,
``input_json_delta``, ``thinking_delta``, ``signature_delta``), ``message_delta`` (stop reason,
usage), ``message_stop``; ``ping`` and unknown events are ignored. Each wire block becomes one dsh
block, closed by its ``block-end`` at ``content_block_stop``:

- ``text`` → ``{type:'text', text}``; ``tool_use`` → ``{type:'tool-call', id, name, arguments}``
  (the streamed JSON text, ``{}`` when none came);
- ``thinking`` → ``{type:'reasoning', text, signature}``, the signature exactly as received, so
  the next request can send the block back unchanged;
- ``redacted_thinking`` → ``{type:'reasoning', text:'', signature: <data>, redacted: true}``.

Usage is disjoint as dsh counts it (Anthropic's ``input_tokens`` already excludes the cache):
``inputTokens``, ``outputTokens``, ``cacheReadTokens`` (``cache_read_input_tokens``),
``cacheWriteTokens`` (``cache_creation_input_tokens``). Reads SDK models and plain mappings
alike, so it needs no SDK import.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from dsh.llm._wire import field as _get
from dsh.llm._wire import integer as _int
from dsh.llm._wire import unknown_finish
from dsh.llm.types import (
    BlockType,
    ContentBlock,
    FinishReason,
    LlmError,
    ReasoningBlock,
    StreamChunk,
    TokenUsage,
)

__all__ = ["Translator", "map_stop_reason"]


def map_stop_reason(reason: str) -> FinishReason:
    """Wire ``stop_reason`` → dsh finish reason (anything unexpected becomes ``error``)."""
    if reason in ("end_turn", "stop_sequence"):
        return {"kind": "stop"}
    if reason == "tool_use":
        return {"kind": "tool-calls"}
    if reason == "max_tokens":
        return {"kind": "max-tokens"}
    return unknown_finish(reason)


class _Open:
    __slots__ = ("call_id", "index", "input", "kind", "name", "parts", "redacted", "signature")

    def __init__(self, index: int, kind: BlockType) -> None:
        self.index = index
        self.kind = kind
        self.parts: list[str] = []
        self.signature: str | None = None
        self.redacted = False
        self.call_id = ""
        self.name = ""
        self.input: object = None

    def block(self) -> ContentBlock:
        text = "".join(self.parts)
        if self.kind == "text":
            return {"type": "text", "text": text}
        if self.kind == "reasoning":
            block: ReasoningBlock = {"type": "reasoning", "text": text}
            if self.signature is not None:
                block["signature"] = self.signature
            if self.redacted:
                block["redacted"] = True
            return block
        if not text:
            text = json.dumps(self.input, separators=(",", ":")) if isinstance(self.input, dict) and self.input else "{}"
        return {"type": "tool-call", "id": self.call_id, "name": self.name, "arguments": text}


class Translator:
    """Wire events → dsh chunks, emitted through ``emit`` as they are produced."""

    def __init__(self, emit: Callable[[StreamChunk], None]) -> None:
        self.emit = emit
        self.open: dict[int, _Open] = {}
        self.count = 0
        self.usage: dict[str, int] = {}
        self.finish: FinishReason | None = None
        self.stopped = False

    def _usage(self, usage: object) -> None:
        for wire, key in (
            ("input_tokens", "inputTokens"),
            ("output_tokens", "outputTokens"),
            ("cache_read_input_tokens", "cacheReadTokens"),
            ("cache_creation_input_tokens", "cacheWriteTokens"),
        ):
            value = _int(_get(usage, wire))
            if value is not None:
                self.usage[key] = value

    def feed(self, event: object) -> None:
        kind = _get(event, "type")
        if kind == "message_start":
            self._usage(_get(_get(event, "message"), "usage"))
        elif kind == "content_block_start":
            self._start(event)
        elif kind == "content_block_delta":
            self._delta(event)
        elif kind == "content_block_stop":
            block = self.open.pop(_int(_get(event, "index")) or 0, None)
            if block is not None:
                self.emit({"type": "block-end", "index": block.index, "block": block.block()})
        elif kind == "message_delta":
            reason = _get(_get(event, "delta"), "stop_reason")
            if isinstance(reason, str) and reason:
                self.finish = map_stop_reason(reason)
            self._usage(_get(event, "usage"))
        elif kind == "message_stop":
            self.stopped = True

    def _start(self, event: object) -> None:
        wire_index = _int(_get(event, "index")) or 0
        content = _get(event, "content_block")
        wire_type = _get(content, "type")
        kind: BlockType
        if wire_type == "text":
            kind = "text"
        elif wire_type in ("thinking", "redacted_thinking"):
            kind = "reasoning"
        elif wire_type == "tool_use":
            kind = "tool-call"
        else:
            return  # server tools and future block types: not part of dsh's vocabulary
        block = _Open(self.count, kind)
        self.count += 1
        self.open[wire_index] = block
        self.emit({"type": "block-start", "index": block.index, "blockType": kind})
        if wire_type == "redacted_thinking":
            data = _get(content, "data")
            block.signature = data if isinstance(data, str) else ""
            block.redacted = True
        elif wire_type == "tool_use":
            block.call_id = str(_get(content, "id") or f"call-{block.index}")
            block.name = str(_get(content, "name") or "")
            block.input = _get(content, "input")
            self.emit(
                {"type": "tool-call-delta", "index": block.index, "id": block.call_id,
                 "name": block.name, "argumentsDelta": ""}
            )
        else:
            initial = _get(content, "text" if kind == "text" else "thinking")
            if isinstance(initial, str) and initial:
                self._text(block, initial)

    def _text(self, block: _Open, text: str) -> None:
        block.parts.append(text)
        if block.kind == "text":
            self.emit({"type": "text-delta", "index": block.index, "text": text})
        else:
            self.emit({"type": "reasoning-delta", "index": block.index, "text": text})

    def _delta(self, event: object) -> None:
        block = self.open.get(_int(_get(event, "index")) or 0)
        if block is None:
            return
        delta = _get(event, "delta")
        kind = _get(delta, "type")
        if kind == "text_delta" or kind == "thinking_delta":
            text = _get(delta, "text" if kind == "text_delta" else "thinking")
            if isinstance(text, str) and text:
                self._text(block, text)
        elif kind == "signature_delta":
            signature = _get(delta, "signature")
            if isinstance(signature, str):
                block.signature = (block.signature or "") + signature
        elif kind == "input_json_delta":
            fragment = _get(delta, "partial_json")
            if isinstance(fragment, str) and fragment:
                block.parts.append(fragment)
                self.emit(
                    {"type": "tool-call-delta", "index": block.index, "id": block.call_id,
                     "argumentsDelta": fragment}
                )

    def end(self) -> None:
        """The wire stream ended: emit usage and finish (a stream cut short is an error)."""
        if self.finish is None or not self.stopped:
            raise LlmError(
                "the model stream ended before message_stop was received", code="STREAM_CLOSED"
            )
        if self.usage:
            usage: TokenUsage = {
                "inputTokens": self.usage.get("inputTokens", 0),
                "outputTokens": self.usage.get("outputTokens", 0),
            }
            for key in ("cacheReadTokens", "cacheWriteTokens"):
                if key in self.usage:
                    usage[key] = self.usage[key]
            self.emit({"type": "usage", "usage": usage})
        self.emit({"type": "finish", "reason": self.finish})
