"""Anthropic's Messages API event stream, scripted, on the loopback :class:`SSEServer`.

Written from Anthropic's documented streaming format: each event is ``event: <type>`` plus
``data: <json>`` whose ``type`` repeats the name; a reply is ``message_start``, for each content
block ``content_block_start`` / ``content_block_delta``... / ``content_block_stop``, then
``message_delta`` (stop reason, output usage) and ``message_stop``; ``ping`` may come anywhere.
Block deltas are ``text_delta``, ``input_json_delta``, ``thinking_delta`` and ``signature_delta``.
The real ``anthropic`` SDK reads it through its base URL (it posts to ``/v1/messages``).

Usage::

    server.push(reply([thinking("Let me look.", "sig-1"), tool_use("toolu_1", "echo", '{"text":"hi"}')],
                      stop="tool_use", usage={"input_tokens": 12, "cache_read_input_tokens": 900}))
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sse_server import Reply

__all__ = ["Block", "error", "event", "redacted", "reply", "text", "thinking", "tool_use"]


def event(kind: str, payload: dict[str, Any]) -> str:
    """One SSE event as Anthropic frames it (``event:`` line, then ``data:``)."""
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **payload})}\n\n"


@dataclass
class Block:
    """One content block: its start payload and its deltas."""

    start: dict[str, Any]
    deltas: list[dict[str, Any]]


def text(*parts: str) -> Block:
    return Block({"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in parts])


def thinking(thought: str, signature: str, *, pieces: int = 2) -> Block:
    step = max(1, len(thought) // pieces)
    chunks = [thought[i : i + step] for i in range(0, len(thought), step)]
    deltas: list[dict[str, Any]] = [{"type": "thinking_delta", "thinking": c} for c in chunks]
    deltas.append({"type": "signature_delta", "signature": signature})
    return Block({"type": "thinking", "thinking": "", "signature": ""}, deltas)


def redacted(data: str) -> Block:
    return Block({"type": "redacted_thinking", "data": data}, [])


def tool_use(call_id: str, name: str, arguments: str, *, pieces: int = 3) -> Block:
    step = max(1, len(arguments) // pieces)
    chunks = [arguments[i : i + step] for i in range(0, len(arguments), step)]
    return Block(
        {"type": "tool_use", "id": call_id, "name": name, "input": {}},
        [{"type": "input_json_delta", "partial_json": c} for c in chunks],
    )


def reply(
    blocks: list[Block],
    *,
    stop: str = "end_turn",
    usage: dict[str, int] | None = None,
    output_tokens: int = 9,
    model: str = "claude-test",
    drop_after: int | None = None,
    delay: float = 0.0,
    headers: dict[str, str] | None = None,
) -> Reply:
    """A whole streamed reply (``drop_after=n``: the connection is cut after n events; ``delay``:
    a pause before every event but the first)."""
    start_usage = {"input_tokens": 10, "output_tokens": 1, **(usage or {})}
    events = [
        event(
            "message_start",
            {"message": {"id": "msg_test", "type": "message", "role": "assistant", "model": model,
                         "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage}},
        ),
        event("ping", {}),
    ]
    for index, block in enumerate(blocks):
        events.append(event("content_block_start", {"index": index, "content_block": block.start}))
        for delta in block.deltas:
            events.append(event("content_block_delta", {"index": index, "delta": delta}))
        events.append(event("content_block_stop", {"index": index}))
    events.append(
        event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                "usage": {"output_tokens": output_tokens}})
    )
    events.append(event("message_stop", {}))
    return Reply(kind="sse", events=[e.encode() for e in events], done=False,
                 drop_after=drop_after, delay=delay, headers=dict(headers or {}))


def error(status: int, kind: str, message: str, *, headers: dict[str, str] | None = None) -> Reply:
    """An Anthropic error body ``{"type":"error","error":{"type","message"}}``."""
    return Reply.json(status, {"type": "error", "error": {"type": kind, "message": message}}, headers=headers)
