"""SQLite store specifics: schema, pragmas, modes, export bytes, corruption and repair by row."""

from __future__ import annotations

import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from store_support import events_json, header_of, make_session, open_tool_turn, persist
from tests.fixtures import FIXTURES

from dsh.persistence.base import CorruptSessionLog, SessionExists, UnsupportedVersion
from dsh.persistence.jsonl import JsonlStore
from dsh.persistence.sqlite import SCHEMA_VERSION, SqliteStore


def connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


async def test_schema_and_pragmas(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    await persist(store, make_session("a", cwd="/w"))
    db = connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    columns = [row[1] for row in db.execute("PRAGMA table_info(events)")]
    assert columns == [
        "session_id",
        "seq",
        "type",
        "time",
        "data",
        "source_event_seqs",
        "surface_op",
        "line",
    ]
    sessions = db.execute(
        "SELECT id, version, created_at, cwd, parent_session, seed_length FROM sessions"
    ).fetchall()
    assert sessions == [("a", 0, 1_783_990_800_000, "/w", None, None)]
    row = db.execute(
        "SELECT type, data, source_event_seqs, surface_op FROM events WHERE seq = 4"
    ).fetchone()
    assert row == (
        "assistant/message",
        '{"turn":1,"step":1,"content":[{"type":"text","text":"re: message 0"}]}',
        "[3]",
        '"append"',
    )
    db.close()
    await store.close()


async def test_file_modes(tmp_path: Path, umask: Callable[[int], None]) -> None:
    umask(0)
    path = tmp_path / "new" / "s.db"
    store = SqliteStore(path)
    await persist(store, make_session("a"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    wal = Path(f"{path}-wal")
    if wal.exists():
        assert stat.S_IMODE(wal.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(f"{path}.locks").stat().st_mode) == 0o700
    await store.close()


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="reference fixtures are not available")
async def test_export_matches_the_jsonl_fixture_and_repair(tmp_path: Path) -> None:
    jsonl = JsonlStore(tmp_path / "j")
    before = (FIXTURES / "crash-before-repair.jsonl").read_bytes()
    # Import the fixture's committed events into SQLite, then load (repair) there.
    header_line, *_lines = before.split(b"\n")
    import json

    header = {k: v for k, v in json.loads(header_line).items() if k != "type"}
    located = jsonl.locate(header)
    assert located is not None
    Path(located).parent.mkdir(parents=True)
    Path(located).write_bytes(before)
    read = await jsonl.read(header["id"])
    store = SqliteStore(tmp_path / "s.db")
    await store.create(header)
    await store.append(header["id"], read.events)
    await store.release(header["id"])
    loaded = await store.load(header["id"])
    assert loaded.repaired == 3
    assert await store.export(header["id"]) == (FIXTURES / "crash-after-repair.jsonl").read_bytes()
    await store.close()


async def test_unparsable_row_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    await persist(store, make_session("a", turns=2))
    db = connect(path)
    db.execute("UPDATE events SET line = '{broken' WHERE seq = 3")
    with pytest.raises(CorruptSessionLog) as info:
        await store.load("a")
    assert str(info.value) == (
        f'corrupt session log: unparsable committed event at row 4 ({path} (session "a"))'
    )
    assert db.execute("SELECT line FROM events WHERE seq = 3").fetchone()[0] == "{broken"
    assert db.execute("SELECT count(*) FROM events").fetchone()[0] == 14
    db.execute("DELETE FROM events WHERE seq = 3")
    with pytest.raises(
        CorruptSessionLog, match=r"seq gap in committed region at row 4 \(expected 3, got 4\)"
    ):
        await store.load("a")
    db.close()
    await store.close()


async def test_key_column_must_match_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    await persist(store, make_session("a", turns=1))
    db = connect(path)
    line = db.execute("SELECT line FROM events WHERE seq = 2").fetchone()[0]
    db.execute("UPDATE events SET line = (SELECT line FROM events WHERE seq = 1) WHERE seq = 2")
    with pytest.raises(CorruptSessionLog, match="row 3"):
        await store.load("a")
    db.execute("UPDATE events SET line = ? WHERE seq = 2", (line,))
    assert len((await store.load("a")).events) == 7
    db.close()
    await store.close()


async def test_torn_rows_after_the_last_turn_end_are_deleted(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    session = make_session("a", turns=1)
    open_tool_turn(session)
    await persist(store, session)
    db = connect(path)
    db.execute(
        "INSERT INTO events VALUES ('a', ?, 'x', 0, '{}', NULL, NULL, '{garbage')", (len(session),)
    )
    loaded = await store.load("a")
    assert loaded.truncated_bytes == len("{garbage")
    assert loaded.repaired == 3
    assert events_json(loaded.events[: len(session)]) == events_json(session.events)
    rows = db.execute("SELECT seq, type FROM events ORDER BY seq").fetchall()
    assert [r[0] for r in rows] == list(range(len(session) + 3))
    assert rows[-1][1] == "turn/end"
    db.close()
    await store.close()


async def test_foreign_or_newer_databases_are_refused(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    db = connect(newer)
    db.execute("PRAGMA user_version = 9")
    db.close()
    with pytest.raises(UnsupportedVersion, match="schema version 9"):
        await SqliteStore(newer).list()
    foreign = tmp_path / "foreign.db"
    db = connect(foreign)
    db.execute("CREATE TABLE t(x)")
    db.close()
    with pytest.raises(UnsupportedVersion, match="not a dsh session database"):
        await SqliteStore(foreign).list()


async def test_first_append_race_in_one_database(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first = SqliteStore(path)
    session = make_session("a")
    await first.create(header_of(session))
    # Someone bypassed the lock and persisted the same id meanwhile.
    other = SqliteStore(tmp_path / "s.db")
    other.lock_dir = str(tmp_path / "other-locks")
    await other.create(header_of(session))
    await other.append("a", list(session.events))
    with pytest.raises(SessionExists):
        await first.append("a", list(session.events))
    assert first.stored_count("a") == 0
    await first.close()
    await other.close()


async def test_list_without_a_database_creates_nothing(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "none" / "s.db")
    assert await store.list() == []
    assert not (tmp_path / "none").exists()


async def test_lookups_of_missing_sessions_create_nothing(tmp_path: Path) -> None:
    from dsh.persistence.base import SessionNotFound

    store = SqliteStore(tmp_path / "none" / "s.db")
    for call in (store.read, store.load, store.remove):
        with pytest.raises(SessionNotFound):
            await call("x")
    assert not (tmp_path / "none").exists()
