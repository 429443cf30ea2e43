"""The facts ``dsh sessions list`` shows for a session: turns, last activity, title, model.

Owns computing them from events (:func:`facts`), and, for a JSONL log too large to read whole
(over ``FULL_READ_BYTES``), from a bounded read (:func:`bounded_facts`): its first and last
``WINDOW_BYTES``, read with ``pread``, and only the complete lines inside them decoded. One 1 GB
line made ``list`` take 20 s and 4.9 GB; now it costs two reads of a MiB. A log read this way is
not validated as a whole: ``CORRUPT`` is shown for the logs ``list`` reads whole, and
``dsh sessions show`` checks any log.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

__all__ = ["FULL_READ_BYTES", "WINDOW_BYTES", "bounded_facts", "facts", "text_of"]

FULL_READ_BYTES = 8 << 20
"""Logs up to this size are read (and validated) whole, as ``dsh sessions show`` reads them."""

WINDOW_BYTES = 1 << 20
"""How much of a larger log's head and tail is read."""

Fact = tuple[str, Mapping[str, Any], int]
"""An event as the facts need it: type, data, time."""


def text_of(blocks: Any) -> str:
    """The text of content blocks (tool calls as name(arguments))."""
    parts = []
    for block in blocks or ():
        if not isinstance(block, dict):
            continue
        if block.get("type") in ("text", "reasoning"):
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool-call":
            parts.append(f"{block.get('name')}({block.get('arguments')})")
    return "".join(parts)


def facts(events: Iterable[Fact], *, any_turn: bool = False) -> dict[str, Any]:
    """Turns (the highest ``turn/start``, or with ``any_turn`` the highest ``turn`` any event
    names: a window may hold a turn's end without its start), last activity, title (the first
    prompt's first line) and the latest model."""
    turns, title, model, last = 0, None, None, None
    for kind, data, time in events:
        last = time
        turn = data.get("turn")
        if (kind == "turn/start" or any_turn) and isinstance(turn, int) and not isinstance(turn, bool):
            turns = max(turns, turn)
        if kind == "user/message" and title is None:
            source = data.get("source") or {}
            if not isinstance(source, dict) or source.get("plugin") != "compact":
                text = text_of(data.get("content")).strip()
                title = text.splitlines()[0] if text else None
        elif kind == "request/header":
            header = data.get("header") or {}
            config = header.get("config") or {} if isinstance(header, dict) else {}
            if isinstance(config, dict) and isinstance(config.get("model"), str):
                model = config["model"]
    return {"turns": turns, "lastActivity": last, "title": title, "model": model}


def _decoded(lines: Iterable[bytes]) -> list[Fact]:
    out: list[Fact] = []
    for line in lines:
        try:
            value = msgspec.json.decode(line)
        except (msgspec.DecodeError, RecursionError):
            continue
        if isinstance(value, dict) and isinstance(value.get("type"), str) and isinstance(value.get("data"), dict):
            time = value.get("time")
            out.append((value["type"], value["data"], time if isinstance(time, int) else 0))
    return out


def bounded_facts(path: str) -> dict[str, Any] | None:
    """The facts of the JSONL log at ``path`` from its head and tail, or ``None`` when it is
    small enough to be read whole (the caller then reads it through the store)."""
    with open(path, "rb") as file:
        fd = file.fileno()
        size = os.fstat(fd).st_size
        if size <= FULL_READ_BYTES:
            return None
        head = os.pread(fd, WINDOW_BYTES, 0)
        start = size - WINDOW_BYTES
        tail = os.pread(fd, WINDOW_BYTES + 1, start - 1)  # one byte more: does a line start here?
    head_lines = head.split(b"\n")[1:-1]  # without the header and the cut line
    tail_lines = tail.split(b"\n")[1:]  # the first piece is the cut line (or empty)
    if tail_lines and tail_lines[-1]:
        tail_lines.pop()  # a torn last line: crash repair's business, not the list's
    head_facts = facts(_decoded(head_lines), any_turn=True)
    tail_facts = facts(_decoded(tail_lines), any_turn=True)
    return {
        "turns": max(head_facts["turns"], tail_facts["turns"]),
        "lastActivity": tail_facts["lastActivity"] or head_facts["lastActivity"],
        "title": head_facts["title"],
        "model": tail_facts["model"] or head_facts["model"],
    }
