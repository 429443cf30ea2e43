"""How long a store's flush stalls the event loop (issue 14: never more than one fsync).

Timed: a ticker task wakes every millisecond and records the longest gap between its wake-ups
while 200 synced JSONL appends (one 27-event turn each) and 200 SQLite appends run one after
another on the same loop. Alongside, the median of a bare ``os.write`` + ``os.fsync`` of the
same bytes on the same disk. ``stall_vs_fsync`` (longest stall / one fsync) is below 1 when no
flush holds the loop for a whole fsync: the blocking calls run on the store's worker thread.
A loaded machine stretches the gaps of both; the ratio is what to read.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from bench._util import median, scratch_dir
from dsh.persistence.base import SessionStore
from dsh.persistence.jsonl import JsonlStore
from dsh.persistence.sqlite import SqliteStore
from dsh.session import Session, encode_event


def _turns(count: int) -> Session:
    session = Session("lag", header={"version": 0, "id": "lag", "createdAt": 1})
    for turn in range(1, count + 1):
        session.append("turn/start", {"turn": turn, "trigger": {"kind": "message"}})
        session.append(
            "user/message", {"content": [{"type": "text", "text": "hi " * 20}]}, surface_op="append"
        )
        for _ in range(24):
            session.append("assistant/chunk", {"turn": turn, "chunk": {"text": "x" * 30}})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return session


async def _flushes(store: SessionStore, session: Session, per: int) -> None:
    events = list(session.events)
    await store.create(dict(session.header))
    for low in range(0, len(events), per):
        await store.append(session.id, events[low : low + per])
    await store.close()


async def _longest_stall(work: Any) -> tuple[float, float]:
    """The longest and the 99th-percentile lateness of a 1 ms ticker while ``work`` runs."""
    gaps: list[float] = []
    done = False

    async def tick() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(max(0.0, now - last - 0.001))
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    try:
        await work
    finally:
        done = True
        await ticker
    gaps.sort()
    return gaps[-1], gaps[int(len(gaps) * 0.99)]


def run(quick: bool) -> dict[str, Any]:
    turns = 50 if quick else 200
    session = _turns(turns)
    per = 27
    payload = b"".join(encode_event(event) + b"\n" for event in list(session.events)[:per])
    with scratch_dir("lag") as root:
        fd = os.open(os.path.join(root, "bare"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        samples = []
        for _ in range(turns):
            began = time.perf_counter()
            os.write(fd, payload)
            os.fsync(fd)
            samples.append(time.perf_counter() - began)
        os.close(fd)
        jsonl = asyncio.run(_longest_stall(_flushes(JsonlStore(os.path.join(root, "j")), session, per)))
        sqlite = asyncio.run(
            _longest_stall(_flushes(SqliteStore(os.path.join(root, "s.db")), session, per))
        )
    fsync = median(samples)
    stall = max(jsonl[0], sqlite[0])
    return {
        "max_stall_ms": stall * 1e3,
        "jsonl_max_stall_ms": jsonl[0] * 1e3,
        "sqlite_max_stall_ms": sqlite[0] * 1e3,
        "jsonl_p99_stall_ms": jsonl[1] * 1e3,
        "sqlite_p99_stall_ms": sqlite[1] * 1e3,
        "fsync_ms": fsync * 1e3,
        "stall_vs_fsync": stall / fsync if fsync else None,
        "flushes": turns,
    }
