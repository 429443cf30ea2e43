"""Moving sessions between stores, and tailing a PostgreSQL session, through the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apps.conftest import dsh_env, run_dsh, session_files
from tests.support.wait import read_until

PG_DSN = os.environ.get("DSH_TEST_DATABASE_URL", "postgresql://127.0.0.1:5432/test")


def _pg_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=3):
            return True
    except Exception:
        return False


@pytest.fixture
def pg_config(workdir: Path) -> Iterator[Path]:
    if not _pg_available():
        pytest.skip("no PostgreSQL server answers")
    import psycopg

    schema = f"dsh_cli_{uuid.uuid4().hex[:10]}"
    config = workdir / "pg.yml"
    config.write_text(
        "- id: store\n  name: postgres-sessions\n"
        f"  config: {{dsn: '{PG_DSN}', schema: {schema}}}\n"
        "- id: echo\n  name: echo-llm\n  config: {delayMs: 0}\n"
        "- id: clock\n  name: time-context\n"
        "- id: app\n  name: stdio-app\n  config: {model: mock-echo}\n"
    )
    yield config
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.slow
def test_export_import_moves_a_session_losslessly_across_all_stores(
    workdir: Path, tmp_path: Path, pg_config: Path
) -> None:
    assert run_dsh(["chat"], workdir, stdin="hello\n").returncode == 0
    [log] = session_files(workdir)
    original = log.read_bytes()
    exported = tmp_path / "s.jsonl"
    exported.write_bytes(original)

    sqlite = ["--store", "sqlite", "--sqlite", str(tmp_path / "s.db")]
    assert run_dsh(["sessions", "import", str(exported), *sqlite], workdir).returncode == 0
    from_sqlite = run_dsh(["sessions", "export", log.stem, *sqlite], workdir)
    assert from_sqlite.stdout.encode() == original

    assert run_dsh(["sessions", "import", str(exported), "--config", str(pg_config)], workdir).returncode == 0
    from_pg = run_dsh(["sessions", "export", log.stem, "--config", str(pg_config)], workdir)
    assert from_pg.returncode == 0, from_pg.stderr
    assert from_pg.stdout.encode() == original

    again = run_dsh(["sessions", "import", str(exported), "--config", str(pg_config)], workdir)
    assert again.returncode == 1 and "already" in again.stderr


@pytest.mark.slow
def test_chat_on_postgres_and_follow_from_another_process(workdir: Path, pg_config: Path) -> None:
    first = run_dsh(["chat", "--config", str(pg_config)], workdir, stdin="one\n")
    assert first.returncode == 0, first.stderr
    listing = run_dsh(["sessions", "list", "--json", "--config", str(pg_config)], workdir)
    import json

    [row] = json.loads(listing.stdout)
    follower = subprocess.Popen(
        [sys.executable, "-m", "dsh", "sessions", "show", row["id"], "--follow", "--events",
         "--config", str(pg_config)],
        cwd=workdir, env=dsh_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert follower.stdout is not None
    try:
        # The follower printed the log so far; from there it LISTENs before it re-reads, so it
        # misses nothing the second chat commits.
        seen = read_until(follower.stdout, lambda text: "turn/end" in text, 60)
        second = run_dsh(["chat", "--config", str(pg_config), "--resume", row["id"]], workdir, stdin="two\n")
        assert second.returncode == 0, second.stderr
        seen = read_until(
            follower.stdout,
            lambda text: "turn/end" in text.split("user/message", 2)[-1] and text.count("turn/end") >= 2,
            20,
            seen=seen,
        )
        assert '"text":"two"' in seen
    finally:
        follower.kill()
        follower.wait()
