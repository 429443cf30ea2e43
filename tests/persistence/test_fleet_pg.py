"""A small fleet on one PostgreSQL database survives a SIGKILL mid-turn (``bench.fleet_pg``).

2 worker processes x 5 agents (echo model, echo tool, time-context, a checkpoint flush before
every step) run 4 turns each against one schema; one worker is SIGKILLed once half of its turns
are reported, the others finish, and a new process resumes the victim's sessions through
``ctx.agent_loop.resume`` (crash repair) and runs one more turn on each. Every log is then read
back from the database and must be valid (the store's own scan and surface checks), contiguous,
closed (every ``turn/start`` has its ``turn/end``, the log ends closed), and hold every event of
every turn a worker reported completed, byte for byte. The checker itself is then shown to
notice a lost completed turn and a hole in a log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from bench.fleet_pg import drop_schema, run_fleet, session_id_of, verify_logs
from bench.pg_append import postgres_unreachable
from store_support import PG_DSN

from dsh.persistence.postgres import PostgresStore

WORKERS, AGENTS, TURNS = 2, 5, 4


@pytest.fixture
async def fleet() -> AsyncIterator[dict[str, Any]]:
    reason = postgres_unreachable(PG_DSN)
    if reason is not None:
        pytest.skip(reason)
    report = await run_fleet(
        workers=WORKERS,
        agents_per_worker=AGENTS,
        turns=TURNS,
        dsn=PG_DSN,
        keep_schema=True,
        timeout=180,
    )
    try:
        yield report
    finally:
        await drop_schema(PG_DSN, report["schema"])


@pytest.mark.sigkill
@pytest.mark.slow
async def test_fleet_survives_sigkill_mid_turn(fleet: dict[str, Any]) -> None:
    report = fleet
    assert report["problems"] == []
    assert report["fleet"]["victim_exit_code"] == -9
    # Killed mid-run: agents had turns left, and (thanks to the pre-step checkpoints) the kill
    # left open turns in the database, which resume closed with ``interrupted`` closers.
    assert report["kill"]["agents_mid_run"] >= 1
    assert report["resume"]["sessions"] == AGENTS
    assert report["resume"]["open_turns_in_db"] >= 1
    assert report["resume"]["closer_events_appended"] >= report["resume"]["open_turns_in_db"]
    assert report["verify"]["interrupted_turns"] == report["resume"]["open_turns_in_db"]
    assert report["verify"]["sessions"] == WORKERS * AGENTS
    # The survivor finished all of its turns, each with a measured turn-end flush.
    survivor_turns = (WORKERS - 1) * AGENTS * TURNS
    done = report["fleet"]["turns_completed"]
    assert done >= survivor_turns + report["kill"]["turns_reported_by_victim"]
    assert report["fleet"]["flush_turn_end"]["count"] == done

    # The checker is not vacuous: a completed turn whose bytes differ, and a hole in a log.
    schema = report["schema"]
    survivor = session_id_of("w0a0")
    expected = {survivor: TURNS}
    forged = {"turn": 1, "reason": "completed", "count": 5, "durable": 5, "sha256": "0" * 64}
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(
            f'DELETE FROM "{schema}".events WHERE session_id = %s AND seq = 7', (survivor,)
        )
    store = PostgresStore(PG_DSN, schema=schema, pool_size=1)
    try:
        problems, _ = await verify_logs(store, expected, {survivor: [forged]}, set())
        assert any("read failed" in problem for problem in problems), problems
        problems, _ = await verify_logs(
            store, {session_id_of("w0a1"): TURNS}, {session_id_of("w0a1"): [forged]}, set()
        )
        assert any("lost or altered" in problem for problem in problems), problems
    finally:
        await store.close()
