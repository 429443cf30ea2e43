"""The chunk assembler: turns a stream of chunks into content blocks, usage and a finish reason.

This module owns the single canonical assembly algorithm (docs/llm.md) that the agent
loop runs on every chunk while it logs the raw chunks:

- blocks are kept in first-seen index order (whatever chunk first mentions the index);
- the first ``block-end`` for an index wins, and later deltas or block-ends for it are ignored;
- without a ``block-end`` a block is assembled from its deltas, and a tool call that never got
  an id is given ``call-<index>``;
- the latest ``usage`` chunk and the ``finish`` chunk are tracked.

Unknown chunk types are ignored (forward compatibility). Deltas are buffered as lists of parts and
joined once on read, so feeding is O(1) per chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from dsh.llm.types import (
    ContentBlock,
    FinishReason,
    LlmError,
    Message,
    ReasoningBlock,
    TextBlock,
    TokenUsage,
    ToolCallBlock,
)

__all__ = ["ChunkAssembler"]


class _Partial:
    """One block under assembly."""

    __slots__ = ("args", "block", "block_type", "call_id", "name", "text")

    def __init__(self, block_type: str) -> None:
        self.block_type = block_type
        self.text: list[str] = []
        self.args: list[str] = []
        self.call_id: str | None = None
        self.name: str | None = None
        self.block: ContentBlock | None = None  # set by the first block-end: authoritative


class ChunkAssembler:
    """Incrementally assembles stream chunks; feed with :meth:`push`, read with :meth:`blocks`."""

    __slots__ = ("_finish", "_partials", "_usage")

    def __init__(self) -> None:
        # dict insertion order is first-seen index order
        self._partials: dict[int, _Partial] = {}
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None

    def push(self, chunk: Mapping[str, Any]) -> None:
        """Feed one chunk, in stream order."""
        kind = chunk["type"]
        if kind == "text-delta" or kind == "reasoning-delta":
            index = chunk["index"]
            partial = self._partials.get(index)
            if partial is None:
                partial = self._partials[index] = _Partial(
                    "text" if kind == "text-delta" else "reasoning"
                )
            elif partial.block is not None:
                return  # closed by block-end: stragglers are ignored
            partial.text.append(chunk["text"])
        elif kind == "tool-call-delta":
            index = chunk["index"]
            partial = self._partials.get(index)
            if partial is None:
                partial = self._partials[index] = _Partial("tool-call")
            elif partial.block is not None:
                return
            call_id = chunk.get("id")
            if call_id:
                partial.call_id = call_id
            name = chunk.get("name")
            if name:
                partial.name = name
            delta = chunk.get("argumentsDelta")
            if delta:
                partial.args.append(delta)
        elif kind == "block-start":
            index = chunk["index"]
            if index not in self._partials:
                self._partials[index] = _Partial(chunk["blockType"])
        elif kind == "block-end":
            index = chunk["index"]
            block = chunk["block"]
            partial = self._partials.get(index)
            if partial is None:
                partial = self._partials[index] = _Partial(block["type"])
            if partial.block is None:
                partial.block = block
        elif kind == "usage":
            self._usage = chunk["usage"]
        elif kind == "finish":
            self._finish = chunk["reason"]

    # ------------------------------------------------------------------ reading

    @staticmethod
    def _assemble(index: int, partial: _Partial) -> ContentBlock:
        if partial.block is not None:
            return partial.block
        kind = partial.block_type
        if kind == "text":
            text: TextBlock = {"type": "text", "text": "".join(partial.text)}
            return text
        if kind == "reasoning":
            reasoning: ReasoningBlock = {"type": "reasoning", "text": "".join(partial.text)}
            return reasoning
        if kind == "tool-call":
            call: ToolCallBlock = {
                "type": "tool-call",
                "id": partial.call_id or f"call-{index}",
                "name": partial.name or "",
                "arguments": "".join(partial.args),
            }
            return call
        raise LlmError(
            f'cannot assemble incomplete block of type "{kind}"', code="MALFORMED_RESPONSE"
        )

    def blocks(self) -> list[ContentBlock]:
        """Every block seen so far, in first-seen index order (open blocks from their deltas)."""
        assemble = self._assemble
        return [assemble(index, partial) for index, partial in self._partials.items()]

    def tool_calls(self) -> list[ToolCallBlock]:
        """The ``tool-call`` blocks of :meth:`blocks`, in order."""
        return [b for b in self.blocks() if b["type"] == "tool-call"]

    def interrupted_blocks(self) -> list[ContentBlock]:
        """What an interrupted stream can keep: non-blank text and reasoning blocks, in order.

        Tool calls are dropped whole (a kept call would demand a fabricated result).
        """
        kept: list[ContentBlock] = []
        for index, partial in self._partials.items():
            kind = partial.block["type"] if partial.block is not None else partial.block_type
            if kind != "text" and kind != "reasoning":
                continue
            block = self._assemble(index, partial)
            if cast(TextBlock, block)["text"].strip():
                kept.append(block)
        return kept

    def message(self) -> Message:
        """The assembled assistant message ``{role:'assistant', content: blocks()}``."""
        return {"role": "assistant", "content": self.blocks()}

    @property
    def usage(self) -> TokenUsage | None:
        """The latest ``usage`` chunk's usage, or ``None`` if none arrived."""
        return self._usage

    @property
    def finish(self) -> FinishReason:
        """The ``finish`` chunk's reason; ``{kind:'stop'}`` when the stream ended without one."""
        if self._finish is not None:
            return self._finish
        return {"kind": "stop"}

    @property
    def finished(self) -> bool:
        """Whether a ``finish`` chunk was seen."""
        return self._finish is not None
