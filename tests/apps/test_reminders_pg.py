"""Several ``dsh reminders run`` workers sharing one PostgreSQL store: every due reminder is
delivered exactly once, and a worker killed with SIGKILL mid-run loses none."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh import _clock
from dsh.persistence import postgres
from dsh.plugins.schedule.fold import Record
from dsh.runtime.loader import PluginEntry
from tests.apps.conftest import dsh_env
from tests.support.rig import make_rig
from tests.support.wait import read_until

pytestmark = pytest.mark.slow

PG_DSN = os.environ.get("DSH_TEST_DATABASE_URL", "postgresql://127.0.0.1:5432/test")
SOURCE = {"kind": "plugin", "plugin": "tool-schedule"}


@pytest.fixture
def schema() -> Iterator[str]:
    import psycopg

    try:
        with psycopg.connect(PG_DSN, connect_timeout=3):
            pass
    except Exception as exc:
        pytest.skip(f"no PostgreSQL at {PG_DSN}: {str(exc).splitlines()[0]}")
    name = f"dsh_rem_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


async def _seed(schema: str, count: int) -> list[str]:
    """``count`` sessions, each with one reminder that fell due a second ago."""
    rig = await make_rig(models=(), store=PluginEntry("store", "postgres-sessions", {"dsn": PG_DSN, "schema": schema}))
    ctx = rig.ctx
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


async def _logs(schema: str, ids: list[str]) -> dict[str, list[Any]]:
    store = postgres.PostgresStore(PG_DSN, schema=schema)
    try:
        return {sid: (await store.read(sid)).events for sid in ids}
    finally:
        await store.close()


def _worker(workdir: Path, config: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dsh", "reminders", "run", "--once", "--config", str(config)],
        cwd=workdir, env=dsh_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _config(workdir: Path, schema: str) -> Path:
    path = workdir / "pg.yml"
    path.write_text(f"- id: store\n  name: postgres-sessions\n  config: {{dsn: '{PG_DSN}', schema: {schema}}}\n")
    return path


def _counts(events: list[Any]) -> tuple[int, int]:
    framings = sum(1 for e in events if e.type == "user/message" and e.data["source"].get("plugin") == SOURCE["plugin"])
    dispatches = sum(1 for e in events if e.type == "schedule/change" and e.data["operation"] == "dispatch")
    return framings, dispatches


def test_two_workers_deliver_fifty_reminders_exactly_once(workdir: Path, schema: str) -> None:
    ids = asyncio.run(_seed(schema, 50))
    config = _config(workdir, schema)
    workers = [_worker(workdir, config), _worker(workdir, config)]
    outputs = [w.communicate(timeout=300) for w in workers]
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err
    delivered = [out.count("delivered schedule-1") for out, _ in outputs]
    assert sum(delivered) == 50
    assert all(n > 0 for n in delivered), delivered  # both took a share
    logs = asyncio.run(_logs(schema, ids))
    assert {sid: _counts(events) for sid, events in logs.items()} == {sid: (1, 1) for sid in ids}
    again = _worker(workdir, config)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert "delivered" not in out


@pytest.mark.sigkill
def test_a_worker_killed_mid_run_loses_no_reminder(workdir: Path, schema: str) -> None:
    ids = asyncio.run(_seed(schema, 50))
    config = _config(workdir, schema)
    victim, survivor = _worker(workdir, config), _worker(workdir, config)
    assert victim.stdout is not None
    read_until(victim.stdout, lambda seen: "delivered" in seen, 120)  # its first delivery
    victim.send_signal(signal.SIGKILL)  # most likely in the middle of its next reminder turn
    victim.wait(timeout=30)
    _, err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, err
    # Whatever the victim held when it died was skipped (locked) by the survivor; one more pass
    # picks it up, as the next scheduled run of a worker would.
    sweep = _worker(workdir, config)
    _, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, err
    logs = asyncio.run(_logs(schema, ids))
    counts = {sid: _counts(events) for sid, events in logs.items()}
    assert all(dispatches == 1 for _, dispatches in counts.values()), counts  # none lost
    repeated = [sid for sid, (framings, _) in counts.items() if framings != 1]
    assert len(repeated) <= 1 and all(counts[sid][0] == 2 for sid in repeated), counts  # at most one repeat
