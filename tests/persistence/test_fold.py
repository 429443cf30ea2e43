"""Fold snapshots (issue 20): a cache that never changes what is loaded.

Every test compares a load that may use a snapshot with a load of the same log in a copy of the
store that has none: same events (every value, in order), same derived messages, same repair,
same truncation, same error text. The snapshots are attacked as the log is: random byte damage,
truncation, a stale snapshot, and a log rewritten by another program.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from store_support import closed_turn, make_session, open_tool_turn, persist

from dsh.persistence._fold import MIN_EVENTS
from dsh.persistence.base import SessionStore, StoreError
from dsh.persistence.jsonl import JsonlStore
from dsh.persistence.sqlite import SqliteStore
from dsh.session import Session

TURNS = MIN_EVENTS // 7 + 10  # make_session writes 7 events per turn


def new_store(kind: str, where: Path) -> SessionStore:
    if kind == "jsonl":
        return JsonlStore(where / "sessions")
    return SqliteStore(where / "db" / "sessions.sqlite")


def fold_file(kind: str, where: Path) -> Path:
    if kind == "jsonl":
        [path] = (where / "sessions").glob("*/*.jsonl.fold")
        return path
    [path] = (where / "db" / "sessions.sqlite.folds").glob("*.fold")
    return path


def without_folds(kind: str, where: Path, copy: Path) -> Path:
    """A copy of the store at ``where`` with no snapshot in it."""
    ignore = shutil.ignore_patterns("*.fold", "*.folds", ".locks", "*.locks")
    shutil.copytree(where, copy, ignore=ignore)
    return copy


async def outcome(store: SessionStore, session_id: str, root: Path, *, load: bool) -> Any:
    """Everything a load or read hands back, as plain data (or the error's text, with the
    store's location as ``<root>``)."""
    try:
        stored = await (store.load(session_id) if load else store.read(session_id))
    except StoreError as exc:
        return f"{type(exc).__name__}: {exc}".replace(str(root), "<root>")
    live = stored.live()
    result = (
        stored.header,
        [event.to_json() for event in stored.events],
        [event.to_json() for event in live.events],
        list(live.derive_messages()),
        live.surface,
        live.last_turn,
        live.open_turn,
        live.replace_generation,
        stored.repaired,
        stored.truncated_bytes,
    )
    if load:
        await store.release(session_id)
    return result


async def same_as_without_fold(kind: str, where: Path, tmp: Path, *, load: bool = True) -> Any:
    bare = without_folds(kind, where, tmp / f"bare-{random.random()}")
    expected = await outcome(new_store(kind, bare), "big", bare, load=load)
    store = new_store(kind, where)
    got = await outcome(store, "big", where, load=load)
    await store.close()
    assert got == expected
    return got


@pytest.fixture(params=["jsonl", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def big_store(kind: str, where: Path) -> Session:
    session = make_session("big", turns=TURNS)
    store = new_store(kind, where)
    await persist(store, session)
    await store.load("big")  # writes the snapshot
    await store.close()
    return session


async def test_resume_from_a_snapshot_is_the_same_session(kind: str, tmp_path: Path) -> None:
    where = tmp_path / "store"
    session = await big_store(kind, where)
    assert fold_file(kind, where).exists()
    store = new_store(kind, where)
    stored = await store.load("big")
    live = stored.live()
    assert live._raw is not None  # resumed from the snapshot, prefix decoded lazily
    original = list(session.events)
    # One at a time (lazily) and in a full walk (batch), the same values.
    assert live.events[5] == original[5] and live.events[-1] == original[-1]
    assert live.events[100:110] == original[100:110]
    assert list(reversed(live.events))[:50] == original[::-1][:50]
    assert live._raw is not None
    assert live.events == original
    assert live._raw is None  # the walk decoded everything and dropped the lines
    assert list(live.derive_messages()) == list(session.derive_messages())
    assert live.surface == session.surface and live.last_turn == session.last_turn
    # Appends after a snapshot resume are checked and stored as usual; a later resume replays
    # the tail after the snapshot and refreshes it.
    for text in ("after", "the snapshot"):
        before = len(live)
        closed_turn(live, text)
        await store.append("big", list(live.events)[before:])
    await store.close()
    await same_as_without_fold(kind, where, tmp_path)
    await same_as_without_fold(kind, where, tmp_path, load=False)


async def test_crash_repair_after_a_snapshot_is_byte_identical(kind: str, tmp_path: Path) -> None:
    where = tmp_path / "store"
    session = await big_store(kind, where)
    store = new_store(kind, where)
    await store.load("big")
    open_tool_turn(session)
    tail = list(session.events)[-5:]
    await store.append("big", tail)
    await store.close()
    got = await same_as_without_fold(kind, where, tmp_path)
    assert got[8] > 0  # closers were written
    exported = await new_store(kind, where).export("big")
    bare = without_folds(kind, where, tmp_path / "bare-export")
    assert exported == await new_store(kind, bare).export("big")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12))
async def test_damaged_snapshot_changes_nothing(kind: str, tmp_path: Path, seed: int) -> None:
    where = tmp_path / "store"
    await big_store(kind, where)
    path = fold_file(kind, where)
    blob = bytearray(path.read_bytes())
    rng = random.Random(seed)
    if seed % 3 == 0:
        del blob[rng.randrange(len(blob)) :]  # truncated
    else:
        for _ in range(1 + seed % 4):  # flipped bytes, anywhere (magic, checksum, body)
            blob[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(blob))
    await same_as_without_fold(kind, where, tmp_path, load=False)
    await same_as_without_fold(kind, where, tmp_path)


async def test_a_snapshot_of_another_log_is_not_used(kind: str, tmp_path: Path) -> None:
    # A stale snapshot: taken of this session, then the log was rewritten by another program
    # (same length, one committed message changed inside the snapshot's prefix).
    where = tmp_path / "store"
    await big_store(kind, where)
    if kind == "jsonl":
        [log] = (where / "sessions").glob("*/*.jsonl")
        raw = log.read_bytes()
        log.write_bytes(raw.replace(b"message 7", b"MESSAGE 7", 1))
    else:
        with sqlite3.connect(where / "db" / "sessions.sqlite") as db:
            db.execute(
                "UPDATE events SET line = replace(line, 'message 7', 'MESSAGE 7') "
                "WHERE session_id = 'big' AND seq = 50"
            )
    got = await same_as_without_fold(kind, where, tmp_path, load=False)
    assert "MESSAGE 7" in str(got[3])
    await same_as_without_fold(kind, where, tmp_path)


@pytest.mark.parametrize("damage", ["unparsable", "seq-gap", "truncated-into-prefix"])
async def test_log_damage_inside_the_prefix_is_found_as_without_a_snapshot(
    kind: str, tmp_path: Path, damage: str
) -> None:
    where = tmp_path / "store"
    await big_store(kind, where)
    if kind == "jsonl":
        [log] = (where / "sessions").glob("*/*.jsonl")
        lines = log.read_bytes().split(b"\n")
        if damage == "unparsable":
            lines[100] = lines[100][:-3]
        elif damage == "seq-gap":
            del lines[100]
        else:
            lines = [*lines[:len(lines) // 2], lines[len(lines) // 2][:10]]
        log.write_bytes(b"\n".join(lines))
    else:
        with sqlite3.connect(where / "db" / "sessions.sqlite") as db:
            if damage == "unparsable":
                db.execute("UPDATE events SET line = substr(line, 1, 20) WHERE seq = 99")
            elif damage == "seq-gap":
                db.execute("DELETE FROM events WHERE seq = 99")
            else:
                db.execute("DELETE FROM events WHERE seq >= 2000")
    got = await same_as_without_fold(kind, where, tmp_path, load=False)
    if damage != "truncated-into-prefix":
        assert isinstance(got, str) and "corrupt session log" in got
    await same_as_without_fold(kind, where, tmp_path)
