"""The keyless ``mock-echo`` model (docs/llm.md), as the ``echo-llm`` plugin.

This module owns :class:`MockEchoAdapter` and the plugin that registers it on the ``LLM`` service. Its
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

``answer`` chooses what the mock reads. ``lastUserBlock`` (the default) is the reference rule
above, which YAML compositions and the reference's own end-to-end runs rely on. With plugin
context in the history (a time reading before every step), that rule answers the reading,
because it is a separate block inside the ``<context>`` wrapper. ``userText`` first drops the
context messages (user-role messages wrapped in ``<context …>…</context>``) and unwraps steering
(``<steering …>…</steering>``), then applies the same rules, so the mock answers what the person
typed and ``echo <text>`` calls the tool even when a reading follows the tool result. The
built-in ``dsh chat`` composition (no ``--config``) uses ``userText``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from dsh._js import json_stringify, utf16_length
from dsh.llm.service import LLM
from dsh.llm.types import AbortSignalLike, LlmRequest, StreamChunk, ToolCallBlock

if TYPE_CHECKING:
    from dsh.runtime import Context

__all__ = ["MODEL", "Config", "MockEchoAdapter", "apply", "inject", "name"]

MODEL = "mock-echo"
"""The keyless model this plugin serves by default (no endpoint, no context window to speak of)."""

name = "echo-llm"
inject = ["llm"]

ECHO_PREAMBLE = "Let me echo that for you."
TOOL_SPOKEN = "The echo tool has spoken."

# A sleep at least this long is raced against the abort signal instead of checked after.
_RACE_THRESHOLD_S = 0.05


Answer = Literal["lastUserBlock", "userText"]


class Config(msgspec.Struct, rename="camel", omit_defaults=True):
    """``delayMs``: pause after each delta (0 for none); ``models``: the names served;
    ``answer``: ``lastUserBlock`` (reference-exact, default) or ``userText`` (skip plugin
    context, see the module doc)."""

    delay_ms: Annotated[float, msgspec.Meta(ge=0)] = 2
    models: list[str] = msgspec.field(default_factory=lambda: [MODEL])
    answer: Answer = "lastUserBlock"


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


def _wrapped(message: Mapping[str, Any], tag: str) -> bool:
    """Whether a user-role message is a ``<tag …>…</tag>`` envelope (as the log projects it)."""
    blocks: Sequence[Mapping[str, Any]] = message.get("content") or []
    if message.get("role") != "user" or len(blocks) < 2:
        return False
    first, last = blocks[0], blocks[-1]
    return (
        first.get("type") == "text"
        and str(first.get("text", "")).startswith(f"<{tag}")
        and last.get("type") == "text"
        and last.get("text") == f"</{tag}>"
    )


def user_authored(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``messages`` without plugin context messages, steering unwrapped to its own blocks."""
    kept: list[Mapping[str, Any]] = []
    for message in messages:
        if _wrapped(message, "context"):
            continue
        if _wrapped(message, "steering"):
            message = {"role": "user", "content": list(message["content"])[1:-1]}
        kept.append(message)
    return kept


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

    def __init__(self, delay_ms: float = 2, answer: Answer = "lastUserBlock") -> None:
        self.delay = max(0.0, delay_ms) / 1000
        self.answer = answer

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        signal = request.signal
        delay = self.delay
        messages: Sequence[Mapping[str, Any]] = request.messages
        if self.answer == "userText":
            messages = user_authored(messages)
        user_text = last_user_text(messages)
        tool_result = has_tool_result(messages)

        if signal is not None and signal.aborted:
            yield {"type": "finish", "reason": {"kind": "aborted"}}
            return

        if user_text.startswith("echo ") and not tool_result:
            args = json_stringify({"text": user_text[5:]})
            async for chunk in _spell(ECHO_PREAMBLE, delay, signal):
                yield chunk
            if signal is not None and signal.aborted:
                return
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
        async for chunk in _spell(reply, delay, signal):
            yield chunk
        if signal is not None and signal.aborted:
            return
        yield {"type": "usage", "usage": {"inputTokens": 20, "outputTokens": utf16_length(reply)}}
        yield {"type": "finish", "reason": {"kind": "stop"}}


async def _spell(text: str, delay: float, signal: AbortSignalLike | None) -> AsyncIterator[StreamChunk]:
    """Text block 0, one delta per character; an abort ends it with ``finish {aborted}``."""
    yield {"type": "block-start", "index": 0, "blockType": "text"}
    for char in text:
        yield {"type": "text-delta", "index": 0, "text": char}
        await _pause(delay, signal)
        if signal is not None and signal.aborted:
            yield {"type": "finish", "reason": {"kind": "aborted"}}
            return
    yield {"type": "block-end", "index": 0, "block": {"type": "text", "text": text}}


def _config(config: object) -> Config:
    if isinstance(config, Config):
        return config
    return msgspec.convert(config or {}, Config)


def apply(ctx: Context, config: Config | Mapping[str, Any] | None = None) -> None:
    """Register :class:`MockEchoAdapter` for ``config.models``; removed with the plugin."""
    cfg = _config(config)
    llm = ctx.require(LLM)
    ctx.defer(llm.register_adapter(cfg.models, MockEchoAdapter(cfg.delay_ms, cfg.answer)))
