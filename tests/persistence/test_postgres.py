"""PostgresStore against a real server (skipped cleanly when none answers).

Each test gets its own schema, dropped afterwards. Cross-process behaviour (writer locks, their
release when the holder is SIGKILLed, live tailing) is exercised with real child processes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest
from tests.support.wait import retry

from dsh import _json
from dsh.persistence import postgres as postgres_plugin
from dsh.persistence._pg_rows import write_rows
from dsh.persistence.base import (
    AppendSeqMismatch,
    CorruptSessionLog,
    InvalidSessionId,
    SessionExists,
    SessionLocked,
    SessionModified,
    SessionNotFound,
    StoreError,
    UnsupportedVersion,
)
from dsh.persistence.jsonl import JsonlStore
from dsh.persistence.postgres import SCHEMA_VERSION, Config, PostgresStore, PostgresUnavailable
from dsh.runtime import ConfigError, Context
from dsh.session import Event, Session, encode_event, interrupted_turn_closers

DSN = os.environ.get("DSH_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _server_answers() -> bool:
    try:
        with psycopg.connect(DSN, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


pytestmark = pytest.mark.skipif(not _server_answers(), reason=f"no PostgreSQL answers at {DSN}")


@pytest.fixture
def schema() -> Iterator[str]:
    name = f"dsh_test_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
async def make_store(schema: str) -> AsyncIterator[Callable[..., PostgresStore]]:
    stores: list[PostgresStore] = []

    def make(**kwargs: Any) -> PostgresStore:
        store = PostgresStore(kwargs.pop("dsn", DSN), schema=kwargs.pop("schema", schema), **kwargs)
        stores.append(store)
        return store

    yield make
    for store in stores:
        await store.close()


@pytest.fixture
async def pg(make_store: Callable[..., PostgresStore]) -> PostgresStore:
    return make_store()


def sql(schema: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement out of band (a tamperer, a racer, or an inspector)."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        cur = conn.execute(statement.replace("{s}", f'"{schema}"'), params or None)
        return cur.fetchall() if cur.description else []


def open_turn_session(sid: str, *, created_at: int = 1_700_000_000_000) -> Session:
    """A session whose turn 1 is cut off after a logged tool call (needs crash repair)."""
    s = Session(sid, header={"version": 0, "id": sid, "createdAt": created_at, "cwd": "/tmp/ø"})
    s.append("turn/start", {"turn": 1})
    s.append(
        "user/message",
        {"turn": 1, "content": [{"type": "text", "text": 'héllo\u0000 \u2028 😀 "q" \\'}]},
        surface_op="append",
    )
    s.append("step/start", {"turn": 1, "step": 1})
    s.append("assistant/chunk", {"turn": 1, "step": 1, "n": 12345678901234567890, "f": 0.1})
    s.append(
        "assistant/message",
        {
            "turn": 1,
            "step": 1,
            "content": [{"type": "tool-call", "id": "c1", "name": "read", "arguments": {"p": 1}}],
        },
        surface_op="append",
    )
    s.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "read"})
    return s


def closed_session(sid: str, created_at: int) -> Session:
    s = Session(sid, header={"version": 0, "id": sid, "createdAt": created_at})
    s.append("turn/start", {"turn": 1})
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    return s


async def persist(store: PostgresStore, session: Session) -> None:
    await store.create(session.header)
    await store.append(session.id, list(session.events))
    await store.release(session.id)


def jsonl_bytes(header: dict[str, Any], events: list[Event]) -> bytes:
    """The JSONL backend's file for these events, built independently of the store."""
    lines = [_json.encode({"type": "session", **header})]
    lines += [encode_event(e) for e in events]
    return b"".join(line + b"\n" for line in lines)


# -- child processes -----------------------------------------------------------------------

CHILD = r"""
import asyncio, sys
from dsh.persistence.postgres import PostgresStore

dsn, schema, sid, mode = sys.argv[1:5]

async def main():
    store = PostgresStore(dsn, schema=schema)
    await store.load(sid)
    if mode == "hold":
        print("LOCKED", flush=True)
        await asyncio.sleep(600)  # holds the lock until killed (the cap ends an orphan)
    await store.close()

asyncio.run(main())
"""


async def spawn(schema: str, sid: str, mode: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, DSN, schema, sid, mode, stdout=asyncio.subprocess.PIPE
    )


async def read_line(proc: asyncio.subprocess.Process, timeout: float = 30) -> str:
    assert proc.stdout is not None
    return (await asyncio.wait_for(proc.stdout.readline(), timeout)).decode().strip()


# -- migrations and connection errors ------------------------------------------------------


async def test_migrations_are_idempotent(
    make_store: Callable[..., PostgresStore], schema: str
) -> None:
    for _ in range(3):
        store = make_store()
        await store.open()
        await store.close()
    assert sql(schema, "SELECT version FROM {s}.schema_version") == [(SCHEMA_VERSION,)]


async def test_concurrent_first_use_migrates_once(
    make_store: Callable[..., PostgresStore], schema: str
) -> None:
    stores = [make_store() for _ in range(8)]
    await asyncio.gather(*(store.open() for store in stores))
    assert sql(schema, "SELECT version FROM {s}.schema_version") == [(SCHEMA_VERSION,)]
    # Every one of them works afterwards.
    await persist(stores[3], closed_session("s", 1))
    assert [len((await st.read("s")).events) for st in stores] == [2] * 8


async def test_newer_schema_is_refused(
    make_store: Callable[..., PostgresStore], schema: str
) -> None:
    await make_store().open()
    sql(schema, "INSERT INTO {s}.schema_version (version) VALUES (%s)", SCHEMA_VERSION + 98)
    with pytest.raises(UnsupportedVersion) as err:
        await make_store().read("anything")
    assert str(err.value) == (
        f'PostgreSQL schema "{schema}" at 127.0.0.1:5432/test is at version '
        f"{SCHEMA_VERSION + 98}, newer than this dsh supports ({SCHEMA_VERSION}); upgrade dsh"
    )


@pytest.mark.perf
async def test_unreachable_server_error_names_target_not_password(
    make_store: Callable[..., PostgresStore],
) -> None:
    store = make_store(dsn="postgresql://postgres:s3cret-pw@127.0.0.1:1/test")
    started = time.monotonic()
    with pytest.raises(PostgresUnavailable) as err:
        await store.create({"version": 0, "id": "x", "createdAt": 1})
    text = str(err.value)
    assert text.startswith("cannot connect to PostgreSQL at 127.0.0.1:1/test: ")
    assert "refused" in text.lower()
    assert "s3cret" not in text
    assert "\n" not in text
    assert time.monotonic() - started < 5
    with pytest.raises(PostgresUnavailable):
        await store.list()


# -- round trip, export, import ------------------------------------------------------------


async def test_round_trip_and_export_is_byte_identical_to_jsonl(
    make_store: Callable[..., PostgresStore], tmp_path: Path
) -> None:
    writer, reader = make_store(), make_store()
    s = open_turn_session("main-session-1")
    s.append(
        "tool/result",
        {"turn": 1, "step": 1, "callId": "c1", "content": [], "isError": False},
        surface_op="append",
        source_event_seqs=[5],
    )
    s.append("step/end", {"turn": 1, "step": 1})
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    events = list(s.events)
    await writer.create(s.header)
    assert writer.stored_count(s.id) == 0
    await writer.append(s.id, events[:4])
    await writer.append(s.id, events[4:])
    assert writer.stored_count(s.id) == len(events)

    # The JSONL store writing the same batches produces exactly the exported bytes.
    jsonl = JsonlStore(tmp_path)
    await jsonl.create(s.header)
    await jsonl.append(s.id, events[:4])
    await jsonl.append(s.id, events[4:])
    await jsonl.close()
    path = jsonl.locate(s.header)
    assert path is not None
    with open(path, "rb") as file:
        assert await reader.export(s.id) == file.read()

    # Reading while the writer holds the session: no lock needed, same events, same header.
    seen = await reader.read(s.id)
    assert seen.events == events and seen.header == s.header and seen.repaired == 0
    assert seen.session is not None and seen.session.derive_messages() == s.derive_messages()
    assert await reader.export(s.id) == jsonl_bytes(s.header, events)

    await writer.release(s.id)
    loaded = await reader.load(s.id)
    assert loaded.events == events and loaded.repaired == 0
    assert [encode_event(e) for e in loaded.events] == [encode_event(e) for e in events]


async def test_export_import_moves_a_session_losslessly(
    make_store: Callable[..., PostgresStore], schema: str
) -> None:
    source = make_store()
    s = open_turn_session("moving")
    await persist(source, s)
    repaired = await source.load(s.id)  # closers include a surfaceOp-first tool/result
    await source.release(s.id)
    exported = await source.export(s.id)
    assert exported == jsonl_bytes(s.header, repaired.events)
    assert b'"surfaceOp":"append","sourceEventSeqs":[5]' in exported

    other_schema = schema + "_b"
    target = make_store(schema=other_schema)
    try:
        await target.import_session(repaired.header, repaired.events)
        assert await target.export(s.id) == exported
        again = await target.load(s.id)
        assert again.events == repaired.events and again.repaired == 0
        with pytest.raises(SessionLocked):
            await target.import_session(repaired.header, repaired.events)
        await target.release(s.id)
        with pytest.raises(SessionExists, match="already has a persisted log"):
            await target.import_session(repaired.header, repaired.events)
    finally:
        await target.close()
        sql(other_schema, "DROP SCHEMA {s} CASCADE")


async def test_non_json_data_is_rejected(pg: PostgresStore) -> None:
    await pg.create({"version": 0, "id": "bad", "createdAt": 1})
    with pytest.raises(TypeError, match='session event "x/y" carries non-JSON-serializable data'):
        await pg.append("bad", [Event("x/y", 0, 1, {"v": float("nan")})])
    assert pg.stored_count("bad") == 0
    await pg.release("bad")
    assert await pg.list() == []


# -- single writer -------------------------------------------------------------------------


async def test_create_rules_and_lazy_materialisation(
    make_store: Callable[..., PostgresStore],
) -> None:
    a, b = make_store(), make_store()
    header = {"version": 0, "id": "lazy", "createdAt": 5}
    await a.create(header)
    with pytest.raises(SessionExists, match='session "lazy" already exists in this backend'):
        await a.create(header)
    with pytest.raises(SessionLocked, match='session "lazy" is open in another process'):
        await b.create(header)
    await a.release("lazy")
    assert a.stored_count("lazy") is None
    # Created but never flushed: nothing persisted, and the id is free again.
    assert await a.list() == []
    with pytest.raises(SessionNotFound, match='session "lazy" not found'):
        await b.read("lazy")
    await persist(b, closed_session("lazy", 5))
    with pytest.raises(SessionExists, match="load/resume it instead of creating"):
        await a.create(header)


async def test_racing_writer_gets_seq_mismatch(pg: PostgresStore, schema: str) -> None:
    s = closed_session("race", 1)
    t2 = s.append("turn/start", {"turn": 2})
    await pg.create(s.header)
    await pg.append("race", list(s.events)[:2])

    # A writer that ignored the lock got seq 2 in first; ours must fail, not interleave.
    sql(
        schema,
        "WITH h AS (UPDATE {s}.sessions SET event_count = 3 WHERE id = 'race' RETURNING id) "
        "INSERT INTO {s}.events (session_id, seq, type, time, data, line) "
        "SELECT id, 2, 'turn/start', 1, '{}', %s FROM h",
        encode_event(Event("turn/start", 2, 1, {"turn": 9})).decode(),
    )
    modified = 'session "race" was modified by another program; dsh stopped writing to it'
    with pytest.raises(SessionModified) as err:
        await pg.append("race", [t2])
    assert str(err.value) == modified
    assert pg.stored_count("race") == 2
    # The writer stopped: a later append is refused the same way, and nothing was written.
    with pytest.raises(SessionModified, match="was modified by another program"):
        await pg.append("race", [t2])
    assert [e.data for e in (await pg.read("race")).events][2] == {"turn": 9}


async def test_confused_caller_gets_seq_mismatch(pg: PostgresStore) -> None:
    s = closed_session("race", 1)
    t2 = s.append("turn/start", {"turn": 2})
    await pg.create(s.header)
    await pg.append("race", list(s.events)[:2])
    # A confused caller: a gap or a non-contiguous batch is refused before any write.
    with pytest.raises(AppendSeqMismatch, match="expected 2 at index 0, got 5"):
        await pg.append("race", [Event("turn/start", 5, 1, {"turn": 3})])
    with pytest.raises(AppendSeqMismatch, match="expected 3 at index 1, got 4"):
        await pg.append("race", [t2, Event("turn/end", 4, 1, {"turn": 2, "reason": {}})])


async def test_racing_first_appends_one_wins(make_store: Callable[..., PostgresStore]) -> None:
    # White-box: two connections run the append statement at the same moment, as two writers
    # that both believe they own the session would. Exactly one commits; the log stays whole.
    store = make_store()
    await store.open()
    s = closed_session("first", 1)
    c1, c2 = await store._server.connect(), await store._server.connect()
    try:
        results = await asyncio.gather(
            *(
                write_rows(
                    c,
                    store._server.q,
                    "first",
                    s.header,
                    _json.dumps({"type": "session", **s.header}),
                    list(s.events),
                    [encode_event(e) for e in s.events],
                )
                for c in (c1, c2)
            ),
            return_exceptions=True,
        )
    finally:
        await c1.close()
        await c2.close()
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], SessionModified)
    assert str(errors[0]) == (
        'session "first" was modified by another program; dsh stopped writing to it'
    )
    assert (await store.read("first")).events == list(s.events)


@pytest.mark.sigkill
@pytest.mark.slow
@pytest.mark.perf
async def test_lock_excludes_other_process_and_dies_with_it(pg: PostgresStore, schema: str) -> None:
    await persist(pg, closed_session("held", 1))
    child = await spawn(schema, "held", "hold")
    try:
        assert await read_line(child) == "LOCKED"
        with pytest.raises(SessionLocked, match='session "held" is open in another process'):
            await pg.load("held")
        with pytest.raises(SessionLocked):
            await pg.remove("held")
        assert len((await pg.read("held")).events) == 2  # readers need no lock
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    started = time.monotonic()
    loaded = await retry(lambda: pg.load("held"), on=SessionLocked, timeout=5)
    assert time.monotonic() - started < 5
    assert len(loaded.events) == 2
    await pg.release("held")
    # release dropped the lock: another process can take it.
    child = await spawn(schema, "held", "hold")
    try:
        assert await read_line(child) == "LOCKED"
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()


# -- load, read, repair, corruption --------------------------------------------------------


async def test_load_repairs_an_interrupted_turn_durably(pg: PostgresStore) -> None:
    s = open_turn_session("crashed")
    await persist(pg, s)
    closers = interrupted_turn_closers(list(s.events))
    assert [e.type for e in closers] == ["tool/result", "step/end", "turn/end"]

    seen = await pg.read("crashed")
    assert seen.events == list(s.events) and seen.repaired == 0  # read never repairs

    loaded = await pg.load("crashed")
    assert loaded.repaired == 3
    assert loaded.events == list(s.events) + closers
    assert pg.stored_count("crashed") == len(s.events) + 3
    Session.restore("crashed", loaded.events, header=loaded.header)  # a valid log
    await pg.release("crashed")

    again = await pg.load("crashed")
    assert again.repaired == 0 and again.events == loaded.events


def two_turns(sid: str) -> Session:
    s = closed_session(sid, 1)
    s.append("turn/start", {"turn": 2})
    s.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})
    return s


async def test_seq_gap_in_committed_region_is_corruption(pg: PostgresStore, schema: str) -> None:
    await persist(pg, two_turns("gappy"))
    sql(schema, "DELETE FROM {s}.events WHERE session_id = 'gappy' AND seq = 1")
    where = f'postgresql://127.0.0.1:5432/test schema "{schema}" (session "gappy")'
    for _ in range(2):  # a failed load keeps no lock
        with pytest.raises(CorruptSessionLog) as err:
            await pg.load("gappy")
        assert str(err.value) == (
            f"corrupt session log: seq gap in committed region at row 2 (expected 1, got 2) ({where})"
        )
    with pytest.raises(CorruptSessionLog, match=r"^corrupt session log: seq gap"):
        await pg.export("gappy")
    with pytest.raises(CorruptSessionLog):
        await pg.read("gappy")


async def test_unparsable_committed_row_is_corruption(pg: PostgresStore, schema: str) -> None:
    await persist(pg, two_turns("odd"))
    sql(schema, "UPDATE {s}.events SET line = '{' WHERE session_id = 'odd' AND seq = 1")
    with pytest.raises(CorruptSessionLog, match=r"unparsable committed event at row 2 \("):
        await pg.read("odd")


async def test_unusable_tail_is_set_aside_then_repaired(pg: PostgresStore, schema: str) -> None:
    # Past the last turn/end the JSONL rules treat a bad line as a torn tail; rows follow them.
    s = two_turns("tail")
    s.append("turn/start", {"turn": 3})
    s.append("user/message", {"content": [{"type": "text", "text": "x"}]}, surface_op="append")
    await persist(pg, s)
    bad = "{not json"
    sql(schema, "UPDATE {s}.events SET line = %s WHERE session_id = 'tail' AND seq = 5", bad)
    seen = await pg.read("tail")  # read sets nothing aside durably
    assert len(seen.events) == 5
    loaded = await pg.load("tail")
    assert loaded.truncated_bytes == len(bad) + 1
    assert [e.type for e in loaded.events[4:]] == ["turn/start", "turn/end"]
    assert loaded.events[-1].data == {"turn": 3, "reason": {"kind": "interrupted"}}
    assert pg.stored_count("tail") == 6
    await pg.release("tail")
    assert (await pg.load("tail")).events == loaded.events


async def test_unsupported_header_version(pg: PostgresStore, schema: str) -> None:
    await persist(pg, closed_session("old", 1))
    sql(
        schema,
        "UPDATE {s}.sessions SET header_line = replace(header_line, '\"version\":0', "
        "'\"version\":1') WHERE id = 'old'",
    )
    with pytest.raises(UnsupportedVersion) as err:
        await pg.load("old")
    assert str(err.value) == 'unsupported session format version 1 for "old" (only v0 is supported)'
    await pg.create({"version": 0, "id": "other", "createdAt": 1})  # the failed load freed the lock


# -- plugin --------------------------------------------------------------------------------


async def test_plugin_provides_the_store_and_closes_it(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_DATABASE_URL", DSN)  # no dsn in the config: the fallback
    ctx = Context()
    fiber = await ctx.plugin(postgres_plugin, {"schema": schema, "poolSize": 2})
    store = ctx.session_store
    assert isinstance(store, PostgresStore) and store.schema == schema
    await persist(store, closed_session("p", 1))
    await store.create({"version": 0, "id": "q", "createdAt": 2})
    await fiber.dispose()
    assert sql(schema, "SELECT id FROM {s}.sessions") == [("p",)]
    # Disposal released every writer lock.
    other = PostgresStore(DSN, schema=schema)
    try:
        await other.create({"version": 0, "id": "q", "createdAt": 2})
    finally:
        await other.close()


async def test_plugin_without_any_dsn_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSH_DATABASE_URL", raising=False)
    with pytest.raises(ConfigError, match=r"^\$\.dsn: missing required value"):
        await Context().plugin(postgres_plugin, {})


def test_config_validation() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"poolSize": 0}, Config)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"schema": ""}, Config)
    assert msgspec.convert({}, Config) == Config(dsn=None, schema="dsh", pool_size=4)


async def test_ids_postgres_cannot_hold_are_refused(pg: PostgresStore) -> None:
    for bad in ("", "a\x00b", "\ud800", "x" * 201):
        with pytest.raises(InvalidSessionId):
            await pg.create({"version": 0, "id": bad, "createdAt": 1})
        with pytest.raises(InvalidSessionId):
            await pg.read(bad)


async def test_writer_that_lost_its_lock_stops(pg: PostgresStore, schema: str) -> None:
    s = closed_session("fenced", 1)
    await pg.create(s.header)
    await pg.append("fenced", list(s.events))
    # The server ends the lock-holding backend (a restart, a partition, an admin). Only that
    # one: a bigint advisory key shows in pg_locks as its high and low 32 bits.
    key = pg._server.lock_key("fenced") & 0xFFFF_FFFF_FFFF_FFFF
    killed = sql(
        schema,
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
        "AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 1 AND granted",
        key >> 32,
        key & 0xFFFF_FFFF,
    )
    assert killed == [(True,)]
    t2 = Event("turn/start", 2, 1, {"turn": 2})
    with pytest.raises(StoreError, match='session "fenced" lost the connection holding its writer'):
        await pg.append("fenced", [t2])
    assert pg.stored_count("fenced") == 2
    await pg.release("fenced")
    assert len((await pg.load("fenced")).events) == 2
