"""What a session's log says about its workspace: the snapshots, and each turn's span.

Owns the two log-only event types and reading them back:

- ``workspace/snapshot`` ``{turn, step, at: "before-step" | "turn-end", tree, tooBig?: [{path,
  bytes}]}``: the workspace as a git tree id, before a step that runs a mutating tool and after a
  turn that had such a step;
- ``workspace/rewind`` ``{toTurn, tree, before, after, restored: [path], restoredMore?, force}``: files were put
  back to ``tree`` (the state before turn ``toTurn``); ``before``/``after`` are the workspace just
  before and after, so a rewind is itself history (and can be rewound).

A turn's span is its first snapshot to its last (the next later one when the turn-end snapshot
is missing after a crash). Pure functions of the events: no git here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dsh.session import Event

__all__ = [
    "REWIND",
    "SNAPSHOT",
    "Mark",
    "TurnInfo",
    "latest_tree",
    "marks",
    "target_for",
    "too_big",
    "turn_span",
    "turns",
]

SNAPSHOT = "workspace/snapshot"
REWIND = "workspace/rewind"


@dataclass(frozen=True)
class Mark:
    """A recorded workspace state: a snapshot, or the result of a rewind (``at == "rewind"``)."""

    seq: int
    turn: int
    tree: str
    at: str
    time: int


@dataclass(frozen=True)
class TurnInfo:
    turn: int
    time: int
    prompt: str


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def marks(events: Sequence[Event]) -> list[Mark]:
    """Every snapshot and rewind result in log order."""
    out: list[Mark] = []
    for event in events:
        data = event.data
        if not isinstance(data, Mapping):
            continue
        if event.type == SNAPSHOT:
            turn, tree = _int(data.get("turn")), data.get("tree")
            if turn is not None and isinstance(tree, str):
                out.append(Mark(event.seq, turn, tree, str(data.get("at", "")), event.time))
        elif event.type == REWIND:
            tree = data.get("after")
            if isinstance(tree, str):
                out.append(Mark(event.seq, _last_turn(events, event.seq), tree, "rewind", event.time))
    return out


def _last_turn(events: Sequence[Event], seq: int) -> int:
    for event in reversed(events[:seq]):
        if event.type == "turn/start" and isinstance(event.data, Mapping):
            return _int(event.data.get("turn")) or 0
    return 0


def turn_span(all_marks: Sequence[Mark], turn: int) -> tuple[str, str | None] | None:
    """``(first tree, last tree)`` of ``turn``; last is ``None`` when no later state is known
    (compare with the workspace as it is now). ``None`` when the turn took no snapshot."""
    snaps = [m for m in all_marks if m.at != "rewind"]
    inside = [m for m in snaps if m.turn == turn]
    if not inside:
        return None
    first = inside[0]
    if inside[-1].at == "turn-end" and len(inside) > 1:
        return first.tree, inside[-1].tree
    later = [m for m in all_marks if m.seq > inside[-1].seq]
    return first.tree, (later[0].tree if later else None)


def session_span(all_marks: Sequence[Mark]) -> tuple[str, str | None] | None:
    """The first recorded state and the latest one (``None``: compare with now)."""
    if not all_marks:
        return None
    first, last = all_marks[0], all_marks[-1]
    if last.at == "turn-end" or last.at == "rewind":
        return first.tree, last.tree
    return first.tree, None


def target_for(all_marks: Sequence[Mark], turn: int) -> Mark | None:
    """The workspace before ``turn``: the first snapshot of ``turn`` or any later turn."""
    for mark in all_marks:
        if mark.at != "rewind" and mark.turn >= turn:
            return mark
    return None


def latest_tree(all_marks: Sequence[Mark]) -> str | None:
    return all_marks[-1].tree if all_marks else None


def snapshot_turns(all_marks: Sequence[Mark], since: int) -> list[int]:
    return sorted({m.turn for m in all_marks if m.at != "rewind" and m.turn >= since})


def too_big(events: Sequence[Event], since_turn: int | None = None) -> dict[str, int]:
    """Files left out of the snapshots of turn ``since_turn`` and later (all when ``None``):
    path -> size in bytes, as the latest snapshot naming them saw it."""
    found: dict[str, int] = {}
    for event in events:
        data = event.data
        if event.type != SNAPSHOT or not isinstance(data, Mapping):
            continue
        turn = _int(data.get("turn"))
        if since_turn is not None and (turn is None or turn < since_turn):
            continue
        for item in data.get("tooBig") or ():
            if isinstance(item, Mapping) and isinstance(item.get("path"), str):
                found[item["path"]] = _int(item.get("bytes")) or 0
    return found


def turns(events: Sequence[Event]) -> list[TurnInfo]:
    """Each turn with its start time and its first prompt's text (one line)."""
    found: dict[int, TurnInfo] = {}
    current: int | None = None
    for event in events:
        data = event.data if isinstance(event.data, Mapping) else {}
        if event.type == "turn/start":
            current = _int(data.get("turn"))
            if current is not None:
                found[current] = TurnInfo(current, event.time, "")
        elif event.type == "user/message" and current is not None and not found[current].prompt:
            text = "".join(
                str(b.get("text", "")) for b in data.get("content") or () if isinstance(b, Mapping)
                and b.get("type") == "text"
            )
            line = " ".join(text.split())
            found[current] = TurnInfo(current, found[current].time, line)
    return [found[k] for k in sorted(found)]
