"""pg_append: 8 sessions flushing 27-event turns on PostgreSQL, beside SQLite and JSONL.

Each of 8 sessions holds the shared workload's turns (200 turns each, 50 with ``quick``), built
beforehand through ``Session.append`` and cut at every ``turn/end``. Every flush is one
``store.append(session_id, turn_events)`` call on the store itself (no coordinator), timed with
``time.perf_counter``:

- **postgres**: one :class:`~dsh.persistence.postgres.PostgresStore` (fresh schema, dropped
  afterwards); the 8 sessions flush concurrently, one asyncio task each, every task awaiting
  its own flushes in order. Each open session writes through its own connection (the one that
  holds its writer lock), so 8 statements can be in flight at once.
- **sqlite** and **jsonl**: their ``append`` runs synchronously inside the coroutine, so the 8
  sessions' flushes are interleaved round-robin (turn t of sessions 1..8, then turn t+1).

``events_per_s`` is all events / the wall time from the first flush to the last; flush
latencies are per ``append`` call (p50/p99, nearest rank). PostgreSQL is skipped, with the
reason, when it cannot be reached (``$DSH_TEST_DATABASE_URL``, default
``postgresql://127.0.0.1:5432/test``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from bench._util import PG_DSN, median, percentile, scratch_dir
from bench.workload import build_session, turn_batches
from dsh.persistence.base import SessionStore
from dsh.persistence.jsonl import JsonlStore
from dsh.persistence.sqlite import SqliteStore
from dsh.session import Event

SESSIONS = 8


class _Work(NamedTuple):
    header: dict[str, Any]
    batches: list[list[Event]]

    @property
    def id(self) -> str:
        return str(self.header["id"])


def _sessions(turns: int) -> list[_Work]:
    """8 sessions' headers, each with the same ``turns`` turns of events cut at turn ends."""
    template = build_session("template", turns)
    batches = turn_batches(list(template.events))
    created = template.header["createdAt"]
    return [
        _Work({"version": 0, "id": f"pg-append-{index}", "createdAt": created}, batches)
        for index in range(SESSIONS)
    ]


def _figures(events: int, wall: float, latencies: list[float]) -> dict[str, Any]:
    return {
        "events_per_s": round(events / wall),
        "turns_per_s": round(len(latencies) / wall, 1),
        "flush_p50_ms": round(median(latencies) * 1000, 3),
        "flush_p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
    }


async def _concurrent(store: SessionStore, work: list[_Work]) -> dict[str, Any]:
    latencies: list[float] = []
    perf = time.perf_counter

    async def one(item: _Work) -> None:
        for batch in item.batches:
            start = perf()
            await store.append(item.id, batch)
            latencies.append(perf() - start)

    for item in work:
        await store.create(dict(item.header))
    start = perf()
    await asyncio.gather(*(one(item) for item in work))
    wall = perf() - start
    events = sum(len(batch) for item in work for batch in item.batches)
    return _figures(events, wall, latencies)


async def _interleaved(store: SessionStore, work: list[_Work]) -> dict[str, Any]:
    latencies: list[float] = []
    perf = time.perf_counter
    for item in work:
        await store.create(dict(item.header))
    start = perf()
    for turn in range(len(work[0].batches)):
        for item in work:
            began = perf()
            await store.append(item.id, item.batches[turn])
            latencies.append(perf() - began)
    wall = perf() - start
    events = sum(len(batch) for item in work for batch in item.batches)
    return _figures(events, wall, latencies)


def postgres_unreachable(dsn: str = PG_DSN) -> str | None:
    """Why PostgreSQL cannot be used here, or ``None`` when it answers."""
    try:
        import psycopg

        with psycopg.connect(dsn, connect_timeout=3):
            return None
    except Exception as exc:
        return f"no PostgreSQL at {dsn}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"


async def _postgres(work: list[_Work]) -> dict[str, Any]:
    import psycopg

    from dsh.persistence.postgres import PostgresStore

    schema = f"dsh_bench_{uuid.uuid4().hex[:10]}"
    store = PostgresStore(PG_DSN, schema=schema)
    try:
        await store.open()
        return await _concurrent(store, work)
    finally:
        await store.close()
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def _with_store(
    make: Callable[[], SessionStore],
    body: Callable[[SessionStore], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    store = make()
    try:
        return await body(store)
    finally:
        await store.close()


def run(quick: bool) -> dict[str, Any]:
    turns = 50 if quick else 200
    result: dict[str, Any] = {"sessions": SESSIONS, "turns_per_session": turns}
    reason = postgres_unreachable()
    if reason is None:
        result["postgres"] = asyncio.run(_postgres(_sessions(turns)))
    else:
        result["postgres"] = {"skipped": reason}
    with scratch_dir("pg-append") as root:
        result["sqlite"] = asyncio.run(
            _with_store(
                lambda: SqliteStore(f"{root}/db/sessions.sqlite"),
                lambda store: _interleaved(store, _sessions(turns)),
            )
        )
        result["jsonl"] = asyncio.run(
            _with_store(
                lambda: JsonlStore(f"{root}/jsonl"),
                lambda store: _interleaved(store, _sessions(turns)),
            )
        )
    result["events"] = SESSIONS * turns * 27
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(args.quick), indent=2))


if __name__ == "__main__":
    main()
