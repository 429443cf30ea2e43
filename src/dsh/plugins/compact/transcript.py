"""The texts compaction writes: the transcript the summariser reads and the checkpoint the model
sees (preamble, ``Covers … to ….`` line, summary tags). These strings are contracts: the
fixtures check them byte for byte."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Final

from dsh.plugins.time_context import TimeContext
from dsh.session import Event
from dsh.session.vocab import TextBlock

__all__ = [
    "CHECKPOINT_PREAMBLE",
    "SUMMARY_CLOSE",
    "SUMMARY_OPEN",
    "checkpoint_content",
    "format_utc",
    "render_entry",
    "render_transcript",
    "span_line",
    "summarizer_prompt",
]

SUMMARY_OPEN: Final = "<compacted-summary>"
SUMMARY_CLOSE: Final = "</compacted-summary>"

CHECKPOINT_PREAMBLE: Final = (
    "This is an automatically generated checkpoint: an earlier span of the conversation, "
    "condensed to free up context. Treat it as established background and do not restate it. "
    "Continue the task from the messages that follow without acknowledging this checkpoint."
)

_BRACKET_ZONE = re.compile(r"\[[^\]]*\]$")


# -- the checkpoint --------------------------------------------------------------------------


def format_utc(ms: int) -> str:
    moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}+00:00"


def span_line(first_ms: int, last_ms: int, time_context: TimeContext | None = None) -> str:
    """``Covers <first> to <last>.`` in time-context's zone (if given), else UTC."""

    def render(ms: int) -> str:
        if time_context is None:
            return format_utc(ms)
        return _BRACKET_ZONE.sub("", time_context.format_timestamp(ms))

    return f"Covers {render(first_ms)} to {render(last_ms)}."


def checkpoint_content(summary: Sequence[TextBlock], span: str | None) -> list[TextBlock]:
    """The checkpoint's blocks: preamble (and span) opening the summary tag, summary, close."""
    head = (
        f"{CHECKPOINT_PREAMBLE}\n\n{span}\n\n{SUMMARY_OPEN}"
        if span
        else f"{CHECKPOINT_PREAMBLE}\n\n{SUMMARY_OPEN}"
    )
    return [
        {"type": "text", "text": head},
        *(block.copy() for block in summary),
        {"type": "text", "text": SUMMARY_CLOSE},
    ]


# -- the transcript --------------------------------------------------------------------------


def _render_block(block: object) -> str | None:
    if type(block) is not dict:
        return "[unknown block]"
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "tool-call":
        return f"[tool-call: {block.get('name')}({block.get('arguments')})]"
    if kind == "reasoning":
        return None
    if kind == "tool-result":
        inner = _render_blocks(block.get("content") or ())
        label = "tool-error" if block.get("isError") else "tool-result"
        return f"[{label} (call {block.get('toolCallId')}): {inner}]"
    return f"[{kind if isinstance(kind, str) else 'unknown'} block]"


def _render_blocks(blocks: Iterable[object]) -> str:
    return "\n".join(text for text in map(_render_block, blocks) if text is not None)


def render_entry(event: Event) -> str | None:
    """One transcript entry, or ``None`` for an event that shows nothing."""
    data = event.data
    body = _render_blocks(data.get("content") or ())
    kind = event.type
    if kind == "user/message":
        return f"User: {body}"
    if kind == "assistant/message":
        return f"Assistant: {body}" if body else None
    if kind == "tool/result":
        label = "Tool error" if data.get("isError") else "Tool result"
        return f"{label} (call {data.get('callId')}): {body}"
    if kind == "context/message":
        return f"[Context: {body}]"
    if kind == "steering/message":
        return f"[Steering: {body}]"
    return None


def render_transcript(events: Sequence[Event], seqs: Iterable[int]) -> str:
    """The shadowed span as the summariser reads it: entries joined by blank lines."""
    entries = (render_entry(events[seq]) for seq in seqs)
    return "\n\n".join(entry for entry in entries if entry is not None)


def summarizer_prompt(transcript: str) -> str:
    return f"Summarize this conversation history:\n\n{transcript}\n\nSummary:"
