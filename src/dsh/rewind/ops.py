"""The rewind operations every front end shares: diff, turn listing, file restore, fork, gc.

Owns turning a session's log (header + events) into answers with the shadow store: the unified
diff of a turn or of the whole session, each turn's change summary, restoring files to before a
turn (returning the ``workspace/rewind`` event data to append), forking the conversation before a
turn, and removing or pruning snapshots. ``dsh sessions diff|rewind|gc|rm``, ``/rewind`` in
``dsh chat`` and ``dsh.Agent.rewind`` call these; none of them appends by itself, the caller
writes the event to the session it holds.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh._clock import now_ms
from dsh.errors import UsageError
from dsh.rewind import history
from dsh.rewind.restore import Conflict, apply_plan, make_plan
from dsh.rewind.store import (
    DEFAULT_RETENTION_DAYS,
    GitError,
    ShadowStore,
    ref_time,
    session_namespace,
    stores,
)
from dsh.session import Event

__all__ = [
    "DEFAULT_RETENTION_DAYS",
    "Conflict",
    "GitError",
    "RewindError",
    "TurnChange",
    "change_summary",
    "delete_snapshots",
    "diff",
    "fork_events",
    "gc",
    "restore_files",
    "restored_count",
    "turn_changes",
]


MAX_LISTED = 500  # restored paths named in the event


class RewindError(Exception):
    """A rewind that cannot be done (no such turn, snapshots gone); one line."""


@dataclass(frozen=True)
class TurnChange:
    turn: int
    time: int
    prompt: str
    files: int
    added: int
    deleted: int


def _store(header: Mapping[str, Any], home: Path | None = None) -> ShadowStore:
    cwd = header.get("cwd")
    return ShadowStore(cwd if isinstance(cwd, str) and cwd else os.getcwd(), home=home)


def _now_tree(store: ShadowStore, session_id: str) -> str:
    return store.snapshot(session_id).tree


def _span_trees(store: ShadowStore, session_id: str, span: tuple[str, str | None]) -> tuple[str, str]:
    first, last = span
    for tree in (first, last):
        if tree is not None and not store.has(tree):
            raise RewindError(f"snapshot {tree[:12]} is no longer stored (deleted or pruned)")
    return first, last if last is not None else _now_tree(store, session_id)


def diff(header: Mapping[str, Any], events: Sequence[Event], turn: int | None, *, home: Path | None = None) -> bytes:
    """The unified diff of what changed in the workspace during ``turn`` (or the session)."""
    marks = history.marks(events)
    _check_turn(events, turn)
    span = history.session_span(marks) if turn is None else history.turn_span(marks, turn)
    if span is None:
        return b""
    store = _store(header, home)
    first, last = _span_trees(store, str(header["id"]), span)
    return store.diff(first, last)


def change_summary(header: Mapping[str, Any], events: Sequence[Event], turn: int, *, home: Path | None = None) -> tuple[int, int, int]:
    """``(files, +lines, -lines)`` changed during ``turn`` (zeros when it took no snapshot)."""
    span = history.turn_span(history.marks(events), turn)
    if span is None:
        return 0, 0, 0
    store = _store(header, home)
    first, last = _span_trees(store, str(header["id"]), span)
    return store.numstat(first, last)


def turn_changes(header: Mapping[str, Any], events: Sequence[Event], *, home: Path | None = None) -> list[TurnChange]:
    """Every turn with its prompt, time and workspace change summary."""
    out = []
    for info in history.turns(events):
        try:
            files, added, deleted = change_summary(header, events, info.turn, home=home)
        except (GitError, RewindError):
            files = added = deleted = 0
        out.append(TurnChange(info.turn, info.time, info.prompt, files, added, deleted))
    return out


def _check_turn(events: Sequence[Event], turn: int | None) -> None:
    if turn is None:
        return
    known = [t.turn for t in history.turns(events)]
    if turn not in known:
        last = max(known) if known else 0
        raise UsageError(f"no turn {turn} in this session (it has turns 1 to {last})" if last else "this session has no turns")


def restore_files(
    header: Mapping[str, Any],
    events: Sequence[Event],
    to_turn: int,
    *,
    force: bool = False,
    home: Path | None = None,
) -> dict[str, Any] | None:
    """Put the files the agent changed since ``to_turn`` back as they were before it.

    Returns the ``workspace/rewind`` data to append, or ``None`` when nothing was recorded
    since (no snapshot at or after that turn). Raises :class:`Conflict` naming the files changed
    after the agent, unless ``force``.
    """
    _check_turn(events, to_turn)
    marks = history.marks(events)
    target = history.target_for(marks, to_turn)
    if target is None:
        return None
    session_id = str(header["id"])
    store = _store(header, home)
    latest = history.latest_tree(marks)
    assert latest is not None
    for tree in (target.tree, latest):
        if not store.has(tree):
            raise RewindError(f"snapshot {tree[:12]} is no longer stored (deleted or pruned)")
    touched: set[str] = set()
    for turn in history.snapshot_turns(marks, to_turn):
        span = history.turn_span(marks, turn)
        if span is not None:
            first, last = span
            touched |= store.changed_paths(first, last if last is not None else latest)
    for mark in marks:
        if mark.at == "rewind" and mark.seq > target.seq:
            touched |= store.changed_paths(target.tree, mark.tree)
    with store.locked():
        now = store._write_tree().tree
        store.keep(session_id, [now])
        want = store.entries(target.tree)
        plan = make_plan(want, store.entries(latest), store.entries(now), touched, force=force)
        apply_plan(store, plan, want)
        after = store._write_tree().tree
        store.keep(session_id, [after])
    data: dict[str, Any] = {
        "toTurn": to_turn,
        "tree": target.tree,
        "before": now,
        "after": after,
        "restored": plan.paths[:MAX_LISTED],
        "force": force,
    }
    if len(plan.paths) > MAX_LISTED:
        data["restoredMore"] = len(plan.paths) - MAX_LISTED
    return data


def restored_count(data: Mapping[str, Any]) -> int:
    """How many files a ``workspace/rewind`` put back (the list is capped)."""
    more = data.get("restoredMore")
    return len(data.get("restored") or ()) + (more if isinstance(more, int) else 0)


def fork_events(
    header: Mapping[str, Any], events: Sequence[Event], before_turn: int
) -> tuple[dict[str, Any], list[Event]]:
    """A new session's header and events: the log up to the end of turn ``before_turn - 1``."""
    _check_turn(events, before_turn)
    cut = 0
    for index, event in enumerate(events):
        if event.type == "turn/start" and isinstance(event.data, Mapping) and event.data.get("turn") == before_turn:
            break
        if event.type == "turn/end":
            cut = index + 1
    source = str(header["id"])
    agent = source.partition("-session-")[0] if "-session-" in source else "main"
    new: dict[str, Any] = {"version": 0, "id": f"{agent}-session-{uuid.uuid4()}", "createdAt": now_ms()}
    if header.get("cwd") is not None:
        new["cwd"] = header["cwd"]
    new["parentSession"] = source
    new["seedLength"] = cut
    return new, list(events[:cut])


def keep_for(header: Mapping[str, Any], session_id: str, events: Sequence[Event], *, home: Path | None = None) -> None:
    """Refs for ``session_id`` on every tree ``events`` name (a fork keeps its snapshots alive)."""
    trees = [m.tree for m in history.marks(events)]
    if not trees:
        return
    store = _store(header, home)
    if store.exists():
        with store.locked():
            store.keep(session_id, [t for t in trees if store.has(t)])


def delete_snapshots(header: Mapping[str, Any], *, home: Path | None = None) -> int:
    """Remove a session's snapshot refs (and objects nothing else keeps); how many refs."""
    try:
        store = _store(header, home)
    except GitError:
        return 0
    return store.delete_session(str(header["id"]))


def gc(
    live_ids: set[str] | None, *, retention_days: float = DEFAULT_RETENTION_DAYS, home: Path | None = None
) -> tuple[int, int]:
    """Drop snapshot refs older than ``retention_days`` and those of sessions not in
    ``live_ids`` (when given); ``(refs removed, stores removed)``."""
    cutoff = now_ms() - int(retention_days * 86_400_000)
    live = {session_namespace(i) for i in live_ids} if live_ids is not None else None
    removed = emptied = 0
    for store in stores(home):
        with store.locked(create=False):
            doomed = []
            for ref in store.refs():
                stamp = ref_time(ref)
                namespace = ref.split("/")[2] if ref.count("/") >= 3 else ""
                if (stamp is not None and stamp < cutoff) or (live is not None and namespace not in live):
                    doomed.append(ref)
            removed += store.drop(doomed)
        if not store.dir.exists():
            emptied += 1
    return removed, emptied
