"""A program other than this writer writes to a session it holds (issue 12, item 2).

The writer lock only keeps other dsh processes out. When anything else (the reference harness
resuming the same session, a script) has written to the log, dsh stops writing that session and
says so in one line, leaving the log exactly as the other program left it. The other program is
a real subprocess appending valid reference-format lines (or rows).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from store_support import make_session, persist
from tests.apps.conftest import Interactive, session_files
from tests.apps.test_stdio_plain import E2E_CONFIG
from tests.support.wait import wait_until_sync

from dsh.persistence.base import SessionModified
from dsh.persistence.jsonl import JsonlStore
from dsh.persistence.sqlite import SqliteStore
from dsh.session import Event, Session, encode_event, interrupted_turn_closers

MODIFIED = 'session "{}" was modified by another program; dsh stopped writing to it'

# Appends its argv[2:] lines to argv[1], as another harness would (O_APPEND, no lock).
_APPEND_LINES = (
    "import os, sys\n"
    "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n"
    "os.write(fd, ''.join(line + '\\n' for line in sys.argv[2:]).encode())\n"
    "os.close(fd)\n"
)

# Inserts (seq, type, line) rows for argv[2] into the SQLite database argv[1].
_INSERT_ROWS = (
    "import json, sqlite3, sys\n"
    "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "for line in sys.argv[3:]:\n"
    "    e = json.loads(line)\n"
    "    db.execute('INSERT INTO events(session_id, seq, type, time, data, line) '\n"
    "               'VALUES (?, ?, ?, ?, ?, ?)', (sys.argv[2], e['seq'], e['type'], e['time'],\n"
    "               json.dumps(e['data']), line))\n"
    "db.close()\n"
)


def foreign(script: str, *args: str) -> None:
    subprocess.run([sys.executable, "-c", script, *args], check=True, timeout=30)


def open_turn(session: Session) -> Session:
    """Start a turn on ``session`` (as a writer mid-turn would have) and return it."""
    turn = session.last_turn + 1
    session.append("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": {"kind": "user"}}})
    session.append(
        "user/message",
        {"content": [{"type": "text", "text": "go on"}], "source": {"kind": "user"}},
        surface_op="append",
    )
    return session


def reference_closers(session: Session) -> list[bytes]:
    """What the reference writes when it resumes a session whose turn is open."""
    return [encode_event(event) for event in interrupted_turn_closers(list(session.events))]


async def test_jsonl_stops_when_another_program_appends(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "sessions")
    session = open_turn(make_session("shared", turns=2))
    await persist(store, session, release=False)
    path = Path(store._find_one("shared"))

    # The other harness resumes the session: closes the open turn as a crash.
    foreign(_APPEND_LINES, str(path), *(line.decode() for line in reference_closers(session)))
    left = path.read_bytes()

    more = session.append("step/start", {"turn": 3, "step": 1})
    with pytest.raises(SessionModified) as info:
        await store.append("shared", [more])
    assert str(info.value) == MODIFIED.format("shared")
    assert path.read_bytes() == left
    # It stays stopped: later appends are refused the same way, the file never touched.
    with pytest.raises(SessionModified):
        await store.append("shared", [more])
    assert path.read_bytes() == left
    await store.release("shared")

    # Both programs can still load it: nothing dsh did made it unreadable.
    again = JsonlStore(tmp_path / "sessions")
    loaded = await again.load("shared")
    assert loaded.repaired == 0 and loaded.truncated_bytes == 0
    assert [encode_event(e) + b"\n" for e in loaded.events] == left.splitlines(keepends=True)[1:]
    await again.close()


async def test_jsonl_own_writes_after_load_and_repair_are_not_foreign(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "sessions")
    session = open_turn(make_session("mine", turns=1))
    await persist(store, session)  # released mid-turn: the next load repairs it
    loaded = await store.load("mine")
    assert loaded.repaired > 0
    live = loaded.live()
    for _ in range(3):  # checkpoints and synced appends alike
        event = live.append("turn/start", {"turn": live.last_turn + 1, "trigger": {"kind": "message", "source": {"kind": "user"}}})
        await store.append("mine", [event], sync=False)
        event = live.append("turn/end", {"turn": live.last_turn, "reason": {"kind": "completed"}})
        await store.append("mine", [event])
    await store.release("mine")
    assert [e.to_json() for e in (await store.read("mine")).events] == [
        e.to_json() for e in live.events
    ]


@pytest.mark.parametrize("how", ["same-size-rewrite", "replaced-file", "truncated", "removed"])
async def test_jsonl_notices_rewrites_that_keep_or_change_the_size(tmp_path: Path, how: str) -> None:
    store = JsonlStore(tmp_path / "sessions")
    session = make_session("edited", turns=2)
    await persist(store, session, release=False)
    path = Path(store._find_one("edited"))
    raw = path.read_bytes()
    if how == "same-size-rewrite":  # an editor changed one letter of the last line in place
        at = raw.rindex(b"completed")
        with open(path, "r+b") as file:
            file.seek(at)
            file.write(b"C")
    elif how == "replaced-file":  # same bytes, but a new file renamed over ours
        temp = path.with_suffix(".new")
        temp.write_bytes(raw)
        os.replace(temp, path)
    elif how == "truncated":
        with open(path, "r+b") as file:
            file.truncate(len(raw) - 5)
    else:
        path.unlink()
    left = path.read_bytes() if path.exists() else None
    event = session.append("turn/start", {"turn": 3, "trigger": {"kind": "message", "source": {"kind": "user"}}})
    with pytest.raises(SessionModified, match="was modified by another program"):
        await store.append("edited", [event])
    assert (path.read_bytes() if path.exists() else None) == left
    await store.close()


async def test_sqlite_stops_when_another_program_inserts_rows(tmp_path: Path) -> None:
    db_path = tmp_path / "db" / "sessions.sqlite"
    store = SqliteStore(db_path)
    session = open_turn(make_session("shared", turns=2))
    await persist(store, session, release=False)
    foreign(_INSERT_ROWS, str(db_path), "shared", *(line.decode() for line in reference_closers(session)))
    before = await SqliteStore(db_path).export("shared")

    more = session.append("step/start", {"turn": 3, "step": 1})
    with pytest.raises(SessionModified) as info:
        await store.append("shared", [more])
    assert str(info.value) == MODIFIED.format("shared")
    with pytest.raises(SessionModified):
        await store.append("shared", [more])
    await store.close()
    assert await SqliteStore(db_path).export("shared") == before


async def test_sqlite_notices_a_rewritten_last_row_and_loaded_sessions_append(tmp_path: Path) -> None:
    db_path = tmp_path / "db" / "sessions.sqlite"
    store = SqliteStore(db_path)
    session = make_session("edited", turns=1)
    await persist(store, session)
    loaded = await store.load("edited")
    live = loaded.live()
    event = live.append("turn/start", {"turn": 2, "trigger": {"kind": "message", "source": {"kind": "user"}}})
    await store.append("edited", [event])  # our own rows after a load are not foreign

    last = encode_event(Event("turn/start", event.seq, event.time, {"turn": 7})).decode()
    with sqlite3.connect(db_path) as db:
        db.execute("UPDATE events SET line = ? WHERE session_id = 'edited' AND seq = ?", (last, event.seq))
    nxt = live.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})
    with pytest.raises(SessionModified, match="was modified by another program"):
        await store.append("edited", [nxt])
    await store.close()
    lines = (await SqliteStore(db_path).export("edited")).splitlines()
    assert lines[-1].decode() == last


@pytest.mark.slow
def test_dsh_chat_reports_one_line_and_leaves_the_file_alone(tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "dsh.yml").write_text(E2E_CONFIG)
    chat = Interactive(["chat", "--config", "dsh.yml"], workdir)
    chat.send("first\n")
    chat.read_until("\n> ", count=2)
    # E2E_CONFIG's persistenceRoot (./.sessions) is a project-local store.
    [log] = session_files(workdir, workdir / ".sessions")
    count = len(log.read_bytes().splitlines()) - 1
    line = json.dumps(
        {"type": "turn/start", "seq": count, "time": 1, "data": {"turn": 2}}, separators=(",", ":")
    )
    foreign(_APPEND_LINES, str(log), line)
    left = log.read_bytes()
    chat.send("second\n")
    chat.read_until("\n> ", count=3)
    rc, out, err = chat.close()
    assert "[main turn 2]" in out  # the conversation goes on, in memory only
    assert rc == 1  # a run whose session stopped being saved is a runtime failure
    [session_id] = [json.loads(left.splitlines()[0])["id"]]
    assert err.splitlines() == [f"dsh: {MODIFIED.format(session_id)}"]
    assert log.read_bytes() == left


CLOCK_REALTIME_COARSE = 5  # Linux: the clock file times are taken from


def _after_the_file_time(path: Path) -> None:
    """Wait until the clock file times come from is past ``path``'s change time (with a margin
    for dsh's own fstat right after its write), so the edit that follows gets a new one: dsh
    documents that a rewrite within the same clock tick as its own write is caught by the
    header and last-line checks alone."""
    changed = path.stat().st_ctime_ns
    while time.clock_gettime_ns(CLOCK_REALTIME_COARSE) <= changed + 20_000_000:
        time.sleep(0.002)


def _flip(raw: bytes, at: int) -> bytes:
    """``raw`` with the letter at ``at`` changed to another letter (same size)."""
    letter = raw[at : at + 1]
    assert letter.isalpha()
    return raw[:at] + (letter.swapcase() if letter.lower() != letter.upper() else b"x") + raw[at + 1 :]


@pytest.mark.attack
@pytest.mark.slow
@pytest.mark.parametrize("where", ["header", "an earlier line", "the last line"])
def test_dsh_chat_notices_a_same_size_rewrite(tmp_path: Path, where: str) -> None:
    """A same-size in-place rewrite of a session dsh holds (one letter changed) is noticed before
    the next append: dsh says so in one line and leaves the file exactly as the editor left it."""
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "dsh.yml").write_text(E2E_CONFIG)
    chat = Interactive(["chat", "--config", "dsh.yml"], workdir)
    chat.send("a first line, long enough to sit well before the last bytes of the log " * 8 + "\n")
    chat.read_until("\n> ", count=2)
    [log] = session_files(workdir, workdir / ".sessions")
    # The turn's flush may still be under way when the prompt shows.
    wait_until_sync(lambda: b'"turn/end"' in log.read_bytes().splitlines()[-1], what="turn 1 on disk")
    raw = log.read_bytes()
    lines = raw.splitlines(keepends=True)
    if where == "header":
        at = raw.index(b'"type":"session"') + len(b'"type":"')
    elif where == "an earlier line":
        [user] = [i for i, line in enumerate(lines) if b'"user/message"' in line]
        at = sum(map(len, lines[:user])) + lines[user].index(b"a first line") + 2
    else:
        at = len(raw) - len(lines[-1]) + lines[-1].index(b"completed")
    assert len(raw) - at > 256 or where == "the last line"  # beyond the old check's 256 bytes
    _after_the_file_time(log)
    with open(log, "r+b") as file:  # in place: same inode, same size
        file.seek(at)
        file.write(_flip(raw, at)[at : at + 1])
    left = log.read_bytes()
    assert len(left) == len(raw) and left != raw
    chat.send("second\n")
    chat.read_until("\n> ", count=3)
    rc, out, err = chat.close()
    assert "[main turn 2]" in out  # the conversation goes on, in memory only
    assert rc == 1
    session_id = json.loads(raw.splitlines()[0])["id"]
    assert err.splitlines() == [f"dsh: {MODIFIED.format(session_id)}"]
    assert log.read_bytes() == left  # nothing appended, nothing rewritten
