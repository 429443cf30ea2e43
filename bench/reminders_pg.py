"""Reminder workers on PostgreSQL: deliveries per second with 1 and 2 ``dsh reminders run --once``
workers, and the cost of folding a schedule log.

``python -m bench.reminders_pg [--sessions 40]``:

1. For each worker count (1, then 2), a fresh schema is seeded in-process with N sessions, each
   holding one reminder that is already due (a ``schedule/change`` create; no turns). Then the
   workers start together (``python -m dsh reminders run --once --config <store file>``, the
   default composition: ``echo-llm`` with its default 2 ms per character, ``time-context``,
   ``schedule``), and the wall time until the last one exits is taken. Each reminder turn is one
   model step; the echo model streams the ~150-character time reading back, so about 0.3 s of
   each turn is the model "thinking" (a sleep, not CPU), as a real model's latency would be.
   Every session is then checked: exactly one framing message and one dispatch.
2. ``fold``: folding a log of 10,000 ``schedule/change`` events (creates, deletes, one-shot
   and fixed-rate dispatches), best of 5, in µs per event.

Output: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

PG_DSN = os.environ.get("DSH_TEST_DATABASE_URL", "postgresql://127.0.0.1:5432/test")
SOURCE = {"kind": "plugin", "plugin": "tool-schedule"}


async def seed(schema: str, count: int) -> list[str]:
    from dsh import _clock
    from dsh.persistence import postgres
    from dsh.plugins.schedule.fold import Record
    from dsh.runtime import Context
    from dsh.testing import mount_agent_loop

    ctx = Context()
    await mount_agent_loop(ctx)
    await ctx.plugin(postgres, {"dsn": PG_DSN, "schema": schema})
    ids = []
    try:
        due = _clock.now_ms() - 1000
        for i in range(count):
            agent = ctx.agent_loop.create(f"seed{i}", model="mock-echo")
            record = Record("schedule-1", "after", f"reminder {i}", due, 60)
            agent.session.append("schedule/change", {"version": 1, "operation": "create", "schedule": record.to_json()})
            await ctx.sessions.flush(agent.session)
            ids.append(agent.session.id)
            await agent.dispose()
    finally:
        await ctx.dispose()
    return ids


async def check(schema: str, ids: list[str]) -> bool:
    from dsh.persistence import postgres

    store = postgres.PostgresStore(PG_DSN, schema=schema)
    try:
        for sid in ids:
            events = (await store.read(sid)).events
            framings = sum(1 for e in events if e.type == "user/message" and e.data["source"] == SOURCE)
            dispatches = sum(1 for e in events if e.type == "schedule/change" and e.data["operation"] == "dispatch")
            if (framings, dispatches) != (1, 1):
                return False
        return True
    finally:
        await store.close()


def drop(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def workers_run(sessions: int, workers: int) -> dict[str, Any]:
    schema = f"dsh_bench_rem_{uuid.uuid4().hex[:10]}"
    try:
        ids = asyncio.run(seed(schema, sessions))
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "pg.yml"
            config.write_text(f"- id: store\n  name: postgres-sessions\n  config: {{dsn: '{PG_DSN}', schema: {schema}}}\n")
            started = time.perf_counter()
            procs = [
                subprocess.Popen([sys.executable, "-m", "dsh", "reminders", "run", "--once", "--config", str(config)],
                                 cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(workers)
            ]
            outs = [p.communicate(timeout=600) for p in procs]
            wall = time.perf_counter() - started
        ok = all(p.returncode == 0 for p in procs) and asyncio.run(check(schema, ids))
        shares = [out.count("delivered schedule-1") for out, _ in outs]
        return {"workers": workers, "sessions": sessions, "wall_s": round(wall, 2),
                "deliveries_per_s": round(sessions / wall, 2), "shares": shares, "exactly_once": ok}
    finally:
        drop(schema)


def fold_cost() -> float:
    from dsh.plugins.schedule.fold import Record, fold
    from dsh.plugins.schedule.timespec import format_instant
    from dsh.session import Event

    t0 = 1_783_987_200_000
    payloads: list[dict[str, Any]] = []
    accepted = t0
    n = 0
    while len(payloads) < 10_000:
        n += 1
        one, every = f"schedule-{2 * n - 1}", f"schedule-{2 * n}"
        payloads.append({"version": 1, "operation": "create", "schedule": Record(one, "after", "p", t0, 5).to_json()})
        payloads.append({"version": 1, "operation": "create", "schedule": Record(every, "every", "p", t0, 300).to_json()})
        payloads.append({"version": 1, "operation": "dispatch", "id": one})
        accepted += 300_000
        payloads.append({"version": 1, "operation": "dispatch", "id": every, "acceptedAt": format_instant(accepted)})
        payloads.append({"version": 1, "operation": "delete", "id": every})
    events = [Event(type="schedule/change", seq=i, time=t0, data=p) for i, p in enumerate(payloads)]
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        fold(events)
        best = min(best, time.perf_counter() - started)
    return best / len(events) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.reminders_pg")
    parser.add_argument("--sessions", type=int, default=40)
    args = parser.parse_args()
    one = workers_run(args.sessions, 1)
    two = workers_run(args.sessions, 2)
    print(json.dumps({
        "one_worker": one,
        "two_workers": two,
        "speedup_2_over_1": round(one["wall_s"] / two["wall_s"], 2),
        "fold_us_per_event": round(fold_cost(), 2),
    }, indent=1))


if __name__ == "__main__":
    main()
