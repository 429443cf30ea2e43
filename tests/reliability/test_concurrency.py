"""Concurrent writers: one writer per session, across processes, and a dead holder never blocks.

Complements ``tests/persistence/test_conformance.py`` (store-level locks held by helper
processes) and ``tests/apps/test_cli.py::test_second_writer_is_refused`` (one JSONL resume while
an idle resume holds the session): here two real ``dsh chat --resume`` processes race for the
same session, a resume is attempted while a chat is in the middle of a turn, and a holder killed
mid-turn is followed at once by the next run, for both the JSONL and the SQLite store.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.reliability.support import (
    WELCOME,
    Chat,
    Snapshot,
    decode,
    expected_closers,
    locked_message,
    race_once,
    run_dsh,
    snapshot,
    sqlite_path,
    start_session,
    user_lines,
    wait_for,
    write_composition,
)

STORES = ["jsonl", "sqlite"]


def _assert_valid(cwd: Path, store: str, session_id: str) -> Snapshot:
    """The log is contiguous, every turn is closed, and a load finds nothing to repair."""
    snap = snapshot(cwd, store)
    events = [decode(line) for line in snap.lines]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert not snap.torn and not expected_closers(events)

    async def load() -> None:
        if store == "jsonl":
            from dsh.persistence.jsonl import JsonlStore

            backend: object = JsonlStore(cwd / ".sessions")
        else:
            from dsh.persistence.sqlite import SqliteStore

            backend = SqliteStore(sqlite_path(cwd))
        try:
            loaded = await backend.load(session_id)  # type: ignore[attr-defined]
            assert loaded.repaired == 0 and loaded.truncated_bytes == 0
        finally:
            await backend.close()  # type: ignore[attr-defined]

    asyncio.run(load())
    return snap


@pytest.mark.slow
@pytest.mark.parametrize("store", STORES)
def test_two_resumes_race_and_exactly_one_writes(store: str, tmp_path: Path) -> None:
    config, session_id = start_session(tmp_path, store)
    for round_ in range(2):
        problems = race_once(tmp_path, config, session_id, f"round {round_}")
        assert not problems, problems
    snap = _assert_valid(tmp_path, store, session_id)
    assert user_lines(snap) == ["hello", "round 0", "round 1"]


@pytest.mark.slow
@pytest.mark.parametrize("store", STORES)
def test_resume_while_a_chat_is_mid_turn_is_refused(store: str, tmp_path: Path) -> None:
    config = write_composition(tmp_path, store=store, delay_ms=4)
    holder = Chat(["--config", str(config)], tmp_path)
    try:
        holder.wait_for(WELCOME)
        holder.send("one [slow]")
        # Wait until turn 1 is streaming and partly on disk (the model checkpoints every delta).
        wait_for(
            lambda: any(b'"assistant/chunk"' in line for line in snapshot(tmp_path, store).lines), 60, "turn 1 to stream"
        )
        session_id = snapshot(tmp_path, store).session_id
        assert session_id is not None
        intruder = run_dsh(["chat", "--config", str(config), "--resume", session_id, "--plain"], tmp_path, stdin="intruder\n")
        assert intruder.returncode == 1, intruder.stdout
        assert intruder.stderr.strip().splitlines() == [locked_message(session_id)]
        # Readers take no lock: they work while the holder writes.
        args = ["sessions", "show", session_id, "--json", "--root", ".sessions"]
        if store == "sqlite":
            args += ["--store", "sqlite", "--sqlite", str(sqlite_path(tmp_path))]
        reader = run_dsh(args, tmp_path)
        assert reader.returncode == 0, reader.stderr
        holder.wait_for("\n> ", 2)
        holder.send("two")
        holder.wait_for("\n> ", 3)
        rc, _, err = holder.close()
        assert rc == 0, err
    finally:
        holder.cleanup()
    snap = _assert_valid(tmp_path, store, session_id)
    assert user_lines(snap) == ["one [slow]", "two"]
    assert b"intruder" not in b"".join(snap.lines)
    # What the reader printed was a committed prefix of the final log.
    shown = reader.stdout.encode().split(b"\n")[1:-1]
    assert shown == snap.lines[: len(shown)]
    assert json.loads(reader.stdout.splitlines()[0])["id"] == session_id


@pytest.mark.sigkill
@pytest.mark.slow
@pytest.mark.parametrize("store", STORES)
def test_a_holder_killed_mid_turn_does_not_block_the_next_run(store: str, tmp_path: Path) -> None:
    config, session_id = start_session(tmp_path, store)
    holder = Chat(["--config", str(config), "--resume", session_id], tmp_path)
    try:
        holder.wait_for(WELCOME)
        holder.send("doomed")
        wait_for(
            lambda: any(b'"assistant/chunk"' in line and b'"turn":2' in line for line in snapshot(tmp_path, store).lines),
            60,
            "turn 2 to stream",
        )
        holder.kill()
    finally:
        holder.cleanup()
    before = snapshot(tmp_path, store)
    # No waiting, no stale-lock cleanup: the kernel dropped the dead holder's lock.
    result = run_dsh(["chat", "--config", str(config), "--resume", session_id, "--plain"], tmp_path, stdin="next\n")
    assert result.returncode == 0, result.stderr
    assert "[main turn 3]" in result.stdout
    snap = _assert_valid(tmp_path, store, session_id)
    assert snap.lines[: len(before.lines)] == before.lines
    closers = expected_closers([decode(line) for line in before.lines])
    assert closers and closers[-1]["data"]["reason"] == {"kind": "interrupted"}
    kept = len(before.lines)
    assert [decode(line) for line in snap.lines[kept : kept + len(closers)]] == closers
    assert user_lines(snap) == ["hello", "doomed", "next"]
