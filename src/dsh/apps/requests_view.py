"""``dsh sessions requests``: every step's model request rebuilt from the log alone.

Owns :func:`iter_requests`, which replays the log once and yields each step's request as soon as
it is known (the header of a step is the one logged right after its ``step/start`` (a first
request or a change), otherwise the latest one before it; the messages are the derivation
snapshot taken just before that ``step/start``), and the two renderings. ``--json`` writes a JSON
array one request at a time and each request one message at a time, so memory stays bounded by
the log itself whatever the output size; the text view puts text, reasoning and each tool call on
their own lines.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from dsh.apps.escape import escape_controls
from dsh.llm import anthropic_request
from dsh.llm.providers import provider_of
from dsh.llm.types import LlmRequest
from dsh.persistence.base import SessionStore, StoreError
from dsh.session import DerivedMessages, Event, Session

Wanted = Callable[[int, int], bool]


def iter_requests(events: Sequence[Event], wanted: Wanted | None = None) -> Iterator[dict[str, Any]]:
    """Each step's request in log order (only the steps ``wanted(turn, step)`` accepts).

    ``messages`` is a lazy sequence over the replay's snapshot: iterate it, or ``list()`` it.
    """
    latest: dict[str, Any] | None = None
    pending: tuple[Event, int, int, DerivedMessages] | None = None
    replay = Session("requests")

    def close(
        step_start: Event, turn: int, step: int, history: DerivedMessages, header: dict[str, Any] | None
    ) -> dict[str, Any]:
        header = header or {}
        config = header.get("config") or {}
        rebuilt = {"turn": turn, "step": step, "seq": step_start.seq, "model": config.get("model"),
                   "config": config, "system": header.get("system"), "tools": header.get("tools") or [],
                   "messages": _Messages(list(header.get("messagePrefix") or []), history)}
        if _is_anthropic(rebuilt["model"]):
            rebuilt["wire"] = anthropic_request.wire_request(_llm_request(rebuilt))
        return rebuilt

    for event in events:
        if event.type == "request/header":
            latest = event.data.get("header")
            if pending is not None:
                yield close(*pending, latest)
                pending = None
        elif pending is not None and event.type in ("assistant/chunk", "step/end", "turn/end", "step/start"):
            yield close(*pending, latest)
            pending = None
        if event.type == "step/start":
            turn, step = int(event.data.get("turn", 0)), int(event.data.get("step", 0))
            if wanted is None or wanted(turn, step):
                pending = (event, turn, step, replay.derive_messages())
        replay.extend([event])
    if pending is not None:
        yield close(*pending, latest)


def _is_anthropic(model: object) -> bool:
    provider = provider_of(model) if isinstance(model, str) else None
    return provider is not None and provider.plugin == "anthropic-llm"


def _llm_request(request: dict[str, Any]) -> LlmRequest:
    return LlmRequest(
        model=str(request["model"]), messages=list(request["messages"]),
        system=request["system"] or None, tools=request["tools"],
    )


class _Messages(Sequence[Any]):
    """The prefix plus a derivation snapshot, without copying the snapshot."""

    def __init__(self, prefix: list[Any], history: DerivedMessages) -> None:
        self._prefix = prefix
        self._history = history

    def __len__(self) -> int:
        return len(self._prefix) + len(self._history)

    def __getitem__(self, index: Any) -> Any:
        return list(self)[index]

    def __iter__(self) -> Iterator[Any]:
        yield from self._prefix
        yield from self._history

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (list, _Messages)) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


def rebuild_requests(events: Sequence[Event]) -> list[dict[str, Any]]:
    """Every step's request as plain data (messages as lists)."""
    return [{**r, "messages": list(r["messages"])} for r in iter_requests(events)]


def _parse_step(text: str) -> tuple[int, int]:
    try:
        turn, step = (int(x) for x in text.split("."))
    except ValueError:
        from dsh.errors import UsageError

        raise UsageError(f"--step must look like TURN.STEP (e.g. 2.1), got {text!r}") from None
    return turn, step


def write_json(request: dict[str, Any], out: TextIO) -> None:
    """One request as compact JSON, written message by message."""
    dumps = json.dumps
    head = {k: v for k, v in request.items() if k != "messages"}
    out.write(dumps(head, ensure_ascii=False)[:-1] + ', "messages": [')
    for index, message in enumerate(request["messages"]):
        if index:
            out.write(", ")
        out.write(dumps(message, ensure_ascii=False))
    out.write("]}")


async def requests(store: SessionStore, args: argparse.Namespace, out: TextIO) -> int:
    only = _parse_step(args.step) if args.step else None
    stored = await store.read(args.id)
    events = stored.events
    del stored  # the log is all we keep; each request is written and dropped
    wanted = (lambda t, s: (t, s) == only) if only else None
    count = 0
    if args.json:
        out.write("[")
        for request in iter_requests(events, wanted):
            out.write(",\n" if count else "\n")
            write_json(request, out)
            out.flush()
            count += 1
        out.write("\n]\n" if count else "]\n")
    else:
        for request in iter_requests(events, wanted):
            write_text(request, out)
            count += 1
    out.flush()
    if only and not count:
        raise StoreError(f'session "{args.id}" has no step {only[0]}.{only[1]}')
    return 0


def write_text(request: dict[str, Any], out: TextIO) -> None:
    lines = [f"── turn {request['turn']} step {request['step']} · model {request['model']} · seq {request['seq']} ──"]
    cached = "wire" in request
    mark = " ⚑ cache" if cached else ""
    marked = anthropic_request.marked_messages(_llm_request(request)) if cached else set()
    if request["system"]:
        lines.append(f"[system] {request['system']}{mark}")
    if request["tools"]:
        lines.append(f"[tools] {', '.join(str(t.get('name', '?')) for t in request['tools'])}{mark}")
    for index, message in enumerate(request["messages"]):
        lines.append(f"[{message['role']}] {message_text(message)}{' ⚑ cache' if index in marked else ''}")
    out.write(escape_controls("\n".join(lines)) + "\n\n")


def message_text(message: dict[str, Any]) -> str:
    """Text blocks inline; reasoning, each tool call and each tool result on a line of its own."""
    parts: list[str] = []
    for block in message.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "reasoning":
            parts.append(f"\n  (reasoning) {block.get('text', '')}")
        elif kind == "tool-call":
            parts.append(f"\n  → tool call {block.get('name')}({block.get('arguments')}) [{block.get('id')}]")
        elif kind == "tool-result":
            inner = "".join(str(b.get("text", "")) for b in block.get("content") or () if b.get("type") == "text")
            parts.append(f"(tool result {block.get('toolCallId')}) {inner}")
    return "".join(parts)
