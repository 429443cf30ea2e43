"""A store that cannot be used is refused in one line before ``ready.``, before any tool can run
(exit 2): a ``--sqlite`` file that is not a database, a truncated or overwritten database, a
folder; a PostgreSQL server that cannot be reached. A scripted model on loopback would call
``bash`` to write a marker file, so a tool that ran would show."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from dsh.persistence._sqlite_db import connect
from dsh.tools.workspace.sandbox import bwrap_status
from tests.apps.conftest import run_dsh
from tests.llm.sse_server import Reply, SSEServer, chunk

pytestmark = [pytest.mark.attack, pytest.mark.slow]

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def _bash_marker() -> Reply:
    args = {"command": "echo ran > marker.txt", "description": "write a marker"}
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "bash", "arguments": json.dumps(args)}}
    return Reply.sse([chunk(tool_calls=[call]), chunk(finish="tool_calls")])


def _database(path: Path, rows: int = 300) -> None:
    """A dsh session database spanning many pages (its tables' ends lie far into the file)."""
    db = connect(str(path))
    with db:
        db.execute(
            "INSERT INTO sessions VALUES ('s', 0, 1, NULL, NULL, NULL, '{}')"
        )
        for seq in range(rows):
            db.execute(
                "INSERT INTO events VALUES ('s', ?, 'x', 1, '{}', NULL, NULL, ?)", (seq, "y" * 1000)
            )
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def _text(path: Path) -> None:
    path.write_text("these are my notes, not a database\n")


def _truncated(path: Path) -> None:
    _database(path)
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.truncate(size // 2)


def _overwritten_header(path: Path) -> None:
    _database(path)
    with path.open("r+b") as f:
        f.write(b"x" * 100)


def _folder(path: Path) -> None:
    path.mkdir()


CASES = [
    (_text, "file is not a database"),
    (_truncated, "database disk image is malformed"),
    (_overwritten_header, "file is not a database"),
    (_folder, "it is a folder"),
]


def _chat(workdir: Path, server: SSEServer, *store: str) -> tuple[int, str, str]:
    args = ["chat", "--base-url", server.base_url, "--model", "test-model", *store]
    out = run_dsh(args, workdir, stdin="write the marker\n", **NO_PROXY)
    return out.returncode, out.stdout, out.stderr


@pytest.mark.skipif(bwrap_status() is not None, reason=f"bubblewrap unusable here: {bwrap_status()}")
@pytest.mark.parametrize(("make", "cause"), CASES, ids=[make.__name__.strip("_") for make, _ in CASES])
def test_unusable_sqlite_file_is_refused_before_any_tool_runs(
    workdir: Path, make: object, cause: str
) -> None:
    bad = workdir / "sessions.db"
    make(bad)  # type: ignore[operator]
    before = sorted(p.name for p in workdir.iterdir())
    with SSEServer() as server:
        server.push(_bash_marker(), Reply.sse([chunk(content="done"), chunk(finish="stop")]))
        rc, stdout, stderr = _chat(workdir, server, "--store", "sqlite", "--sqlite", "sessions.db")
        asked = len(server.requests)
    assert rc == 2, stderr
    assert stdout == ""  # no "ready.", no reply
    assert stderr.splitlines() == [f"dsh: cannot use session database sessions.db: {cause}"]
    assert asked == 0 and not (workdir / "marker.txt").exists()
    assert sorted(p.name for p in workdir.iterdir() if not p.name.startswith("sessions.db.")) == before


@pytest.mark.skipif(bwrap_status() is not None, reason=f"bubblewrap unusable here: {bwrap_status()}")
@pytest.mark.parametrize("existing", ["none", "empty"])
def test_a_new_or_zero_length_sqlite_file_is_used(workdir: Path, existing: str) -> None:
    """The control: the same run against a usable file runs the tool and saves the session (a
    zero-length file is an empty SQLite database, as for the sqlite3 shell)."""
    if existing == "empty":
        (workdir / "sessions.db").write_bytes(b"")
    with SSEServer() as server:
        server.push(_bash_marker(), Reply.sse([chunk(content="done"), chunk(finish="stop")]))
        rc, stdout, stderr = _chat(workdir, server, "--store", "sqlite", "--sqlite", "sessions.db")
    assert rc == 0, stderr
    assert stdout.startswith("ready.")
    assert (workdir / "marker.txt").read_text() == "ran\n"
    db = sqlite3.connect(workdir / "sessions.db")
    assert db.execute("SELECT count(*) FROM events").fetchone()[0] > 5


def test_unreachable_postgres_is_refused_before_ready(workdir: Path) -> None:
    out = run_dsh(
        ["chat", "--store", "postgres", "--dsn", "postgresql://dsh:pw-secret@127.0.0.1:1/x"],
        workdir, stdin="hello\n",
    )
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith("dsh: cannot connect to PostgreSQL at 127.0.0.1:1/x: ")
    assert "pw-secret" not in line


@pytest.mark.parametrize(
    "command",
    [["sessions", "list"], ["reminders", "list"], ["reminders", "run", "--once"], ["run", "hello"], ["acp"]],
)
def test_other_commands_refuse_a_file_that_is_not_a_database(workdir: Path, command: list[str]) -> None:
    _text(workdir / "notes.db")
    out = run_dsh([*command, "--store", "sqlite", "--sqlite", "notes.db"], workdir)
    assert out.returncode == 2, out.stderr
    assert out.stderr == "dsh: cannot use session database notes.db: file is not a database\n"
    assert (workdir / "notes.db").read_text() == "these are my notes, not a database\n"
