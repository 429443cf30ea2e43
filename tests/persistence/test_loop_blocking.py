"""A store's blocking calls leave the event loop (issue 14: the loop is never blocked by a store).

The JSONL and SQLite stores run file I/O, ``fsync`` and SQLite on a worker thread. Each test
holds a flush inside a real blocking call and checks that the event loop keeps running other
work meanwhile, and that the flush still completes durably once the call returns. Were the call
made on the loop thread, the loop could never release it (the tests would fail, not hang: every
wait is bounded).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from pathlib import Path

import pytest
from store_support import make_session

from dsh.persistence.jsonl import JsonlStore
from dsh.persistence.sqlite import SqliteStore


async def _ticks_while(flush: asyncio.Task[None], release: threading.Event) -> int:
    """Run loop iterations while ``flush`` is held, then release it; how many ran."""
    ticks = 0
    for _ in range(200):
        await asyncio.sleep(0)
        ticks += 1
    assert not flush.done(), "the flush returned while its blocking call was still held"
    release.set()
    await asyncio.wait_for(flush, timeout=60)
    return ticks


async def test_jsonl_fsync_runs_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = make_session("lag", turns=1)
    store = JsonlStore(tmp_path)
    await store.create(dict(session.header))
    events = list(session.events)
    await store.append(session.id, events[:2])
    loop_thread = threading.get_ident()
    entered, release = threading.Event(), threading.Event()
    threads: list[int] = []
    real_fsync = os.fsync

    def held_fsync(fd: int) -> None:
        threads.append(threading.get_ident())
        entered.set()
        assert release.wait(timeout=60), "the loop never released the fsync"
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", held_fsync)
    flush = asyncio.create_task(store.append(session.id, events[2:]))
    assert await asyncio.to_thread(entered.wait, 60)
    ticks = await _ticks_while(flush, release)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert ticks == 200 and threads and loop_thread not in threads
    assert store.stored_count(session.id) == len(events)
    await store.close()
    assert len((await JsonlStore(tmp_path).read(session.id)).events) == len(events)


async def test_sqlite_write_waiting_for_the_database_runs_off_the_event_loop(
    tmp_path: Path,
) -> None:
    session = make_session("lag", turns=1)
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    await store.create(dict(session.header))
    events = list(session.events)
    await store.append(session.id, events[:2])
    # Another connection holds the write lock: the append's BEGIN IMMEDIATE waits for it.
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    release = threading.Event()
    flush = asyncio.create_task(store.append(session.id, events[2:]))

    async def hold_then_commit() -> int:
        ticks = 0
        for _ in range(200):
            await asyncio.sleep(0)
            ticks += 1
        assert not flush.done(), "the append returned while the database was locked"
        other.execute("COMMIT")
        release.set()
        await asyncio.wait_for(flush, timeout=60)
        return ticks

    assert await hold_then_commit() == 200
    other.close()
    assert store.stored_count(session.id) == len(events)
    await store.close()
    assert len((await SqliteStore(path).read(session.id)).events) == len(events)
