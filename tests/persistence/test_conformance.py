"""The store contract (docs/stores.md), run against every backend: JSONL, SQLite, PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from store_support import (
    Backend,
    closed_turn,
    events_json,
    header_of,
    make_session,
    open_tool_turn,
    persist,
)
from tests.support.wait import retry

from dsh.persistence.base import (
    AppendSeqMismatch,
    SessionExists,
    SessionLocked,
    SessionNotFound,
    SessionStore,
)
from dsh.persistence.jsonl import header_line
from dsh.session import INTERRUPTED_TOOL_TEXT, Event, Session, encode_event


async def test_create_append_load_round_trip(backend: Backend, store: SessionStore) -> None:
    session = make_session("round-trip", turns=2)
    events = list(session.events)
    await store.create(header_of(session))
    assert store.stored_count("round-trip") == 0
    await store.append("round-trip", events[:5])
    await store.append("round-trip", events[5:])
    assert store.stored_count("round-trip") == len(events)
    await store.release("round-trip")
    assert store.stored_count("round-trip") is None

    loaded = await backend.make().load("round-trip")
    assert loaded.header == session.header
    assert events_json(loaded.events) == events_json(events)
    assert loaded.repaired == 0
    assert loaded.truncated_bytes == 0
    restored = loaded.session or Session.restore("round-trip", loaded.events, header=loaded.header)
    assert restored.derive_messages() == session.derive_messages()

    read = await backend.make().read("round-trip")
    assert events_json(read.events) == events_json(events)


async def test_append_is_incremental_and_empty_append_writes_nothing(store: SessionStore) -> None:
    session = make_session("incremental", turns=0)
    await store.create(header_of(session))
    await store.append("incremental", [])
    with pytest.raises(SessionNotFound):
        await store.read("incremental")  # still nothing persisted
    for text in ("a", "b", "c"):
        before = len(session)
        closed_turn(session, text)
        await store.append("incremental", list(session.events)[before:])
    read = await store.read("incremental")
    assert events_json(read.events) == events_json(session.events)


async def test_seq_mismatch(store: SessionStore) -> None:
    session = make_session("mismatch", turns=2)
    events = list(session.events)
    await store.create(header_of(session))
    with pytest.raises(AppendSeqMismatch) as info:
        await store.append("mismatch", events[1:3])
    assert str(info.value) == 'append seq mismatch for "mismatch": expected 0 at index 0, got 1'
    await store.append("mismatch", events[:3])
    with pytest.raises(AppendSeqMismatch) as info:
        await store.append("mismatch", [events[3], events[5]])
    assert str(info.value) == 'append seq mismatch for "mismatch": expected 4 at index 1, got 5'
    assert store.stored_count("mismatch") == 3  # a refused batch writes nothing
    await store.append("mismatch", events[3:])
    read = await store.read("mismatch")
    assert events_json(read.events) == events_json(events)


async def test_non_json_data_is_rejected(store: SessionStore) -> None:
    session = make_session("nonjson", turns=1)
    await store.create(header_of(session))
    bad = Event("todo/write", 0, 1, {"todos": [float("nan")]})
    with pytest.raises(TypeError, match='session event "todo/write" carries non-JSON-serializable'):
        await store.append("nonjson", [bad])
    assert store.stored_count("nonjson") == 0


async def test_create_exists_errors(backend: Backend, store: SessionStore) -> None:
    session = make_session("dup", turns=1)
    await store.create(header_of(session))
    with pytest.raises(SessionExists) as info:
        await store.create(header_of(session))
    assert str(info.value) == 'session "dup" already exists in this backend'
    await store.append("dup", list(session.events))
    await store.release("dup")

    other = backend.make()
    with pytest.raises(SessionExists) as info:
        await other.create(header_of(session))
    assert str(info.value) == (
        'session "dup" already has a persisted log on disk; load/resume it instead of creating'
    )
    # A refused create leaves no lock behind.
    loaded = await other.load("dup")
    assert len(loaded.events) == len(session)


async def test_not_found(store: SessionStore) -> None:
    for call in (store.load, store.read, store.remove):
        with pytest.raises(SessionNotFound) as info:
            await call("missing")
        assert str(info.value) == 'session "missing" not found'


async def test_created_but_never_flushed_leaves_nothing(
    backend: Backend, store: SessionStore
) -> None:
    session = make_session("lazy", turns=1)
    await store.create(header_of(session))
    await store.release("lazy")
    other = backend.make()
    assert await other.list() == []
    with pytest.raises(SessionNotFound):
        await other.load("lazy")
    await other.create(header_of(session))  # the id is free again


async def test_list_newest_first_headers_only(backend: Backend, store: SessionStore) -> None:
    for index, created in enumerate((3000, 1000, 2000)):
        session = make_session(f"s{index}", turns=1, created_at=created, cwd=f"/w/{index}")
        await persist(store, session)
    await store.create({"version": 0, "id": "empty", "createdAt": 9999})  # zero events: absent
    infos = await backend.make().list()
    assert [info.id for info in infos] == ["s0", "s2", "s1"]
    assert [info.created_at for info in infos] == [3000, 2000, 1000]
    assert infos[0].header == {"version": 0, "id": "s0", "createdAt": 3000, "cwd": "/w/0"}
    assert [i.id for i in await store.list(limit=2)] == ["s0", "s2"]
    assert [i.id for i in await store.list(offset=1)] == ["s2", "s1"]
    assert [i.id for i in await store.list(limit=1, offset=1)] == ["s2"]
    assert await store.list(offset=5) == []


async def test_load_repairs_an_open_turn_durably(backend: Backend, store: SessionStore) -> None:
    session = make_session("crashed", turns=1)
    open_tool_turn(session)
    await persist(store, session)
    last = session.events[-1]

    first = backend.make()
    loaded = await first.load("crashed")
    assert loaded.repaired == 3
    closers = loaded.events[len(session) :]
    assert [e.type for e in closers] == ["tool/result", "step/end", "turn/end"]
    assert [e.seq for e in closers] == [len(session), len(session) + 1, len(session) + 2]
    assert all(e.time == last.time for e in closers)
    result = closers[0]
    assert result.source_event_seqs == [last.seq]
    assert result.data["content"] == [{"type": "text", "text": INTERRUPTED_TOOL_TEXT}]
    assert result.data["error"] == {"name": "InterruptedError", "code": "interrupted"}
    assert closers[2].data == {"turn": 2, "reason": {"kind": "interrupted"}}
    # The closer writes surfaceOp before sourceEventSeqs, exactly as the reference does.
    assert encode_event(result).index(b'"surfaceOp"') < encode_event(result).index(b'"sourceEvent')
    assert first.stored_count("crashed") == len(session) + 3
    await first.release("crashed")

    again = await backend.make().load("crashed")
    assert again.repaired == 0
    assert events_json(again.events) == events_json(loaded.events)
    assert [e.surface_first for e in again.events] == [e.surface_first for e in loaded.events]
    exported = await backend.make().export("crashed")
    assert exported == _jsonl(again.header, again.events)


async def test_export_is_jsonl_bytes(backend: Backend, store: SessionStore) -> None:
    session = make_session("export", turns=2)
    session.append(
        "context/message",
        {"content": [{"type": "text", "text": "ünïcödé ✓ 你好 \x1b[0m 👋"}], "source": USER_PLUGIN},
        surface_op="append",
    )
    await persist(store, session)
    assert await backend.make().export("export") == _jsonl(session.header, session.events)


@pytest.mark.sigkill
@pytest.mark.slow
async def test_lock_excludes_other_processes_and_dies_with_them(
    backend: Backend, store: SessionStore, children: Any
) -> None:
    session = make_session("locked", turns=1)
    await persist(store, session)
    spawn = children
    holder = await spawn(backend.spec, "hold", "locked")
    assert await holder.line() == "ready"

    with pytest.raises(SessionLocked) as info:
        await store.load("locked")
    assert str(info.value) == 'session "locked" is open in another process'
    with pytest.raises(SessionLocked):
        await store.remove("locked")
    probe = await spawn(backend.spec, "try-load", "locked")
    assert (await probe.line()).startswith("SessionLocked")
    # Reading never needs the lock.
    read = await store.read("locked")
    assert len(read.events) == len(session)
    reader = await spawn(backend.spec, "read", "locked")
    assert await reader.line() == f"ok {len(session)}"

    holder.kill()
    await holder.wait()
    loaded = await retry(lambda: store.load("locked"), on=SessionLocked)  # once the holder is gone
    assert len(loaded.events) == len(session)


@pytest.mark.sigkill
async def test_unflushed_create_holds_the_lock_across_processes(
    backend: Backend, store: SessionStore, children: Any
) -> None:
    holder = await children(backend.spec, "hold-new", "fresh")
    assert await holder.line() == "ready"
    with pytest.raises(SessionLocked):
        await store.create({"version": 0, "id": "fresh", "createdAt": 5})
    holder.kill()
    await holder.wait()
    await retry(lambda: store.create({"version": 0, "id": "fresh", "createdAt": 5}), on=SessionLocked)
    assert store.stored_count("fresh") == 0


async def test_second_store_in_the_same_process_is_locked_out(backend: Backend) -> None:
    first, second = backend.make(), backend.make()
    session = make_session("twice", turns=1)
    await first.create(header_of(session))
    with pytest.raises(SessionLocked):
        await second.create(header_of(session))
    await first.append("twice", list(session.events))
    with pytest.raises(SessionLocked):
        await second.load("twice")
    await first.release("twice")
    loaded = await second.load("twice")
    assert len(loaded.events) == len(session)


async def test_close_releases_every_lock(backend: Backend) -> None:
    first = backend.make()
    for name in ("c1", "c2"):
        await persist(first, make_session(name), release=False)
    await first.close()
    second = backend.make()
    for name in ("c1", "c2"):
        assert len((await second.load(name)).events) == 7


async def test_remove(backend: Backend, store: SessionStore) -> None:
    session = make_session("gone", turns=1)
    await persist(store, session)
    await persist(store, make_session("kept", turns=1))
    holder = backend.make()
    await holder.load("gone")
    with pytest.raises(SessionLocked):
        await store.remove("gone")
    await holder.release("gone")
    await store.remove("gone")
    with pytest.raises(SessionNotFound):
        await store.load("gone")
    with pytest.raises(SessionNotFound):
        await store.remove("gone")
    assert [info.id for info in await store.list()] == ["kept"]
    await store.create(header_of(session))  # the id can be used again


async def test_resume_continues_appending(backend: Backend, store: SessionStore) -> None:
    session = make_session("resumed", turns=1)
    await persist(store, session)
    writer = backend.make()
    loaded = await writer.load("resumed")
    live = loaded.session or Session.restore("resumed", loaded.events, header=loaded.header)
    before = len(live)
    closed_turn(live, "after resume")
    await writer.append("resumed", list(live.events)[before:])
    await writer.release("resumed")
    read = await backend.make().read("resumed")
    assert events_json(read.events) == events_json(live.events)


# -- helpers -----------------------------------------------------------------------------------

USER_PLUGIN = {"kind": "plugin", "plugin": "test"}


def _jsonl(header: dict[str, object], events: list[Event] | object) -> bytes:
    lines = [header_line(header)] + [encode_event(e) for e in events]  # type: ignore[attr-defined]
    return b"".join(line + b"\n" for line in lines)
