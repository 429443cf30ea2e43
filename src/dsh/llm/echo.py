"""The keyless ``mock-echo`` model (docs/llm.md), as the ``echo-llm`` plugin.

This module owns :class:`MockEchoAdapter` and the plugin that registers it on ``ctx.llm``. Its
chunk stream reproduces the reference mock byte for byte (see the ``stdio-tool-call`` fixture):

- ``lastUserText``: user-role messages newest first, each one's blocks in their own order; the
  first text block whose text does not start with ``<`` (so context wrapper tags are skipped),
  else ``''``;
- ``hasToolResult``: the last message holds a ``tool-result`` block;
- ``echo <rest>`` without a tool result: text block 0 ``Let me echo that for you.`` streamed one
  character per delta, then tool-call block 1 (``call-echo``/``echo``, arguments
  ``{"text":"<rest>"}`` in one delta), ``usage {20, 10}``, finish ``tool-calls``;
- otherwise one text block, one character per delta, ``usage {20, <UTF-16 length>}``, finish
  ``stop``.

Each delta is followed by a ``delayMs`` pause (default 2 ms). An aborted ``request.signal`` ends
the stream promptly with finish ``{kind:'aborted'}``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from dsh.llm.types import AbortSignalLike, LlmRequest, StreamChunk, ToolCallBlock

if TYPE_CHECKING:
    from dsh.runtime import Context

__all__ = ["Config", "MockEchoAdapter", "apply", "inject", "name"]

name = "echo-llm"
inject = ["llm"]

ECHO_PREAMBLE = "Let me echo that for you."
TOOL_SPOKEN = "The echo tool has spoken."

# A sleep at least this long is raced against the abort signal instead of checked after.
_RACE_THRESHOLD_S = 0.05


class Config(msgspec.Struct, rename="camel", omit_defaults=True):
    """``delayMs``: pause after each delta (0 for none); ``models``: the names served."""

    delay_ms: Annotated[float, msgspec.Meta(ge=0)] = 2
    models: list[str] = msgspec.field(default_factory=lambda: ["mock-echo"])


def _js_json(value: object) -> str:
    """``JSON.stringify`` for plain JSON values (compact, raw non-ASCII)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _utf16_len(text: str) -> int:
    """JavaScript's ``string.length``: UTF-16 code units."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The newest user-role text that does not start with ``<``, else ``''``."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        for block in message.get("content") or ():
            if block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str) and not text.startswith("<"):
                    return text
    return ""


def has_tool_result(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the last message contains a ``tool-result`` block."""
    if not messages:
        return False
    return any(block.get("type") == "tool-result" for block in messages[-1].get("content") or ())


async def _pause(seconds: float, signal: AbortSignalLike | None) -> None:
    if seconds <= 0:
        return
    if signal is None or seconds < _RACE_THRESHOLD_S:
        await asyncio.sleep(seconds)
        return
    waiter = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait({waiter}, timeout=seconds)
    finally:
        waiter.cancel()


class MockEchoAdapter:
    """The ``mock-echo`` model: echoes the user, or calls the ``echo`` tool on ``echo <text>``."""

    def __init__(self, delay_ms: float = 2) -> None:
        self.delay = max(0.0, delay_ms) / 1000

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        signal = request.signal
        delay = self.delay
        messages = request.messages
        user_text = last_user_text(messages)
        tool_result = has_tool_result(messages)

        if signal is not None and signal.aborted:
            yield {"type": "finish", "reason": {"kind": "aborted"}}
            return

        if user_text.startswith("echo ") and not tool_result:
            args = _js_json({"text": user_text[5:]})
            yield {"type": "block-start", "index": 0, "blockType": "text"}
            for char in ECHO_PREAMBLE:
                yield {"type": "text-delta", "index": 0, "text": char}
                await _pause(delay, signal)
                if signal is not None and signal.aborted:
                    yield {"type": "finish", "reason": {"kind": "aborted"}}
                    return
            yield {
                "type": "block-end",
                "index": 0,
                "block": {"type": "text", "text": ECHO_PREAMBLE},
            }
            yield {"type": "block-start", "index": 1, "blockType": "tool-call"}
            yield {
                "type": "tool-call-delta",
                "index": 1,
                "id": "call-echo",
                "name": "echo",
                "argumentsDelta": args,
            }
            call: ToolCallBlock = {
                "type": "tool-call",
                "id": "call-echo",
                "name": "echo",
                "arguments": args,
            }
            yield {"type": "block-end", "index": 1, "block": call}
            yield {"type": "usage", "usage": {"inputTokens": 20, "outputTokens": 10}}
            yield {"type": "finish", "reason": {"kind": "tool-calls"}}
            return

        if tool_result:
            reply = TOOL_SPOKEN
        else:
            reply = f'You said: "{user_text}". Try "echo <something>" to see a tool call.'
        yield {"type": "block-start", "index": 0, "blockType": "text"}
        for char in reply:
            yield {"type": "text-delta", "index": 0, "text": char}
            await _pause(delay, signal)
            if signal is not None and signal.aborted:
                yield {"type": "finish", "reason": {"kind": "aborted"}}
                return
        yield {"type": "block-end", "index": 0, "block": {"type": "text", "text": reply}}
        yield {"type": "usage", "usage": {"inputTokens": 20, "outputTokens": _utf16_len(reply)}}
        yield {"type": "finish", "reason": {"kind": "stop"}}


def _config(config: object) -> Config:
    if isinstance(config, Config):
        return config
    return msgspec.convert(config or {}, Config)


def apply(ctx: Context, config: Config | Mapping[str, Any] | None = None) -> None:
    """Register :class:`MockEchoAdapter` for ``config.models``; removed with the plugin."""
    cfg = _config(config)
    llm = ctx.llm
    ctx.defer(llm.register_adapter(cfg.models, MockEchoAdapter(cfg.delay_ms)))
