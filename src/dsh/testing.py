"""Test helpers: mount an in-memory agent spine, and script a model.

:func:`mount_agent_loop` mounts exactly what an agent loop needs to run in memory (sessions, LLM
service, tools, system prompt, agent registry, agent loop) and nothing else: no persistence, no
time-context, no compaction, no adapters. :class:`ScriptedAdapter` answers each request with the
next scripted reply and records every request it received.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from dsh.compose import mount_spine
from dsh.llm.service import LLM
from dsh.llm.types import FinishReason, LlmRequest, StreamChunk, TokenUsage
from dsh.runtime import Context, Fiber
from dsh.session import DerivedMessages


async def mount_agent_loop(ctx: Context, *, loop_config: Mapping[str, object] | None = None) -> list[Fiber]:
    """Mount the in-memory agent spine on ``ctx``; returns the fibers in mount order."""
    return await mount_spine(ctx, loop_config=loop_config)


@dataclass
class Reply:
    """One scripted model reply: text (streamed in ``deltas`` pieces), tool calls, finish.

    ``delay`` seconds pass before each text delta (a slow stream). ``error`` is raised before
    the first chunk. ``chunks``, when given, replaces everything else: each item is streamed
    verbatim (``delay`` before each), or raised if it is an exception, so a test can script a
    missing finish, a mid-stream failure or any finish reason exactly.
    """

    text: str = ""
    tool_calls: Sequence[tuple[str, str, Mapping[str, object] | str]] = ()
    reasoning: str = ""
    finish: FinishReason | None = None
    usage: TokenUsage | None = field(default_factory=lambda: TokenUsage(inputTokens=10, outputTokens=5))
    deltas: int = 1
    delay: float = 0.0
    error: BaseException | None = None
    chunks: Sequence[Mapping[str, Any] | BaseException] | None = None


ReplyFactory = Callable[[LlmRequest], Reply]


class ScriptedAdapter:
    """An adapter that streams scripted replies in order and records each request."""

    def __init__(self, replies: Sequence[Reply | ReplyFactory | str] = (), *, default: Reply | str | None = None):
        self._replies: list[Reply | ReplyFactory | str] = list(replies)
        self._default = default
        self.requests: list[LlmRequest] = []

    def add(self, *replies: Reply | ReplyFactory | str) -> None:
        self._replies.extend(replies)

    def register(self, ctx: Context, *models: str) -> Callable[[], None]:
        """Serve ``models`` (default ``scripted``) on the ``LLM`` service; returns the unregister."""
        return ctx.require(LLM).register_adapter(list(models) or ["scripted"], self)

    @property
    def pending(self) -> int:
        """Scripted replies not consumed yet."""
        return len(self._replies)

    def _next(self, request: LlmRequest) -> Reply:
        if self._replies:
            item = self._replies.pop(0)
        elif self._default is not None:
            item = self._default
        else:
            raise AssertionError("ScriptedAdapter ran out of replies")
        if isinstance(item, str):
            return Reply(text=item)
        if isinstance(item, Reply):
            return item
        return item(request)

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        messages = request.messages
        if not isinstance(messages, DerivedMessages):
            # A session's derived-message snapshot is immutable already and is kept as is;
            # anything else gets a shallow copy. Never a deep copy of the whole history, so a
            # long scripted session does not slow down as it grows.
            messages = list(messages)
        self.requests.append(replace(request, messages=messages, tools=list(request.tools)))
        reply = self._next(request)
        if reply.error is not None:
            raise reply.error
        if reply.chunks is not None:
            for item in reply.chunks:
                if reply.delay:
                    await asyncio.sleep(reply.delay)
                if isinstance(item, BaseException):
                    raise item
                # Verbatim, possibly malformed on purpose: the test decides what the model sends.
                yield cast(StreamChunk, dict(item))
            return
        index = 0
        if reply.reasoning:
            yield {"type": "block-start", "index": index, "blockType": "reasoning"}
            yield {"type": "reasoning-delta", "index": index, "text": reply.reasoning}
            yield {"type": "block-end", "index": index, "block": {"type": "reasoning", "text": reply.reasoning}}
            index += 1
        if reply.text:
            yield {"type": "block-start", "index": index, "blockType": "text"}
            for piece in _split(reply.text, reply.deltas):
                if reply.delay:
                    await asyncio.sleep(reply.delay)
                yield {"type": "text-delta", "index": index, "text": piece}
            yield {"type": "block-end", "index": index, "block": {"type": "text", "text": reply.text}}
            index += 1
        for call_id, name, args in reply.tool_calls:
            raw = args if isinstance(args, str) else json.dumps(args, separators=(",", ":"))
            yield {"type": "block-start", "index": index, "blockType": "tool-call"}
            yield {"type": "tool-call-delta", "index": index, "id": call_id, "name": name, "argumentsDelta": raw}
            yield {
                "type": "block-end",
                "index": index,
                "block": {"type": "tool-call", "id": call_id, "name": name, "arguments": raw},
            }
            index += 1
        if reply.usage is not None:
            yield {"type": "usage", "usage": reply.usage.copy()}
        finish: FinishReason = reply.finish or (
            {"kind": "tool-calls"} if reply.tool_calls else {"kind": "stop"}
        )
        yield {"type": "finish", "reason": finish.copy()}


def _split(text: str, pieces: int) -> list[str]:
    pieces = max(1, min(pieces, len(text)))
    size = -(-len(text) // pieces)
    return [text[i : i + size] for i in range(0, len(text), size)]
