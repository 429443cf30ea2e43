"""``dsh sessions list`` reads only what it shows: a log with a 200 MB line is listed (title from
the first turn, turns, last activity) by a ``dsh`` whose address space is capped far below what
reading that line takes (one 1 GB line took 20 s and 4.9 GB)."""

from __future__ import annotations

import asyncio
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsh.persistence.jsonl import JsonlStore
from dsh.session import Session
from tests.apps.conftest import dsh_env

pytestmark = pytest.mark.attack

USER = {"kind": "user"}
ADDRESS_SPACE = 512 << 20
BIG = 200 << 20


def _turn(session: Session, text: str) -> None:
    turn = session.last_turn + 1
    session.append("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": USER}})
    session.append("user/message", {"content": [{"type": "text", "text": text}], "source": USER}, surface_op="append")
    session.append("step/start", {"turn": turn, "step": 1})
    session.append(
        "assistant/message", {"turn": turn, "step": 1, "content": [{"type": "text", "text": "ok"}]}, surface_op="append"
    )
    session.append("step/end", {"turn": turn, "step": 1})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


def _log_with_a_big_line(root: Path, cwd: Path) -> Path:
    """A valid log of three turns whose second prompt is ``BIG`` bytes long (written in blocks)."""
    session = Session("big", header={"version": 0, "id": "big", "createdAt": 1_783_990_800_000, "cwd": str(cwd)})
    for text in ("first prompt", "PLACEHOLDER", "third prompt"):
        _turn(session, text)

    async def persist() -> None:
        store = JsonlStore(root)
        await store.create(dict(session.header))
        await store.append("big", list(session.events))
        await store.close()

    asyncio.run(persist())
    [log] = root.rglob("*.jsonl")
    raw = log.read_bytes()
    before, after = raw.split(b"PLACEHOLDER")
    with log.open("wb") as out:
        out.write(before)
        block = b"x" * (1 << 20)
        for _ in range(BIG >> 20):
            out.write(block)
        out.write(after)
    return log


def _list(cwd: Path, root: Path) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    return subprocess.run(
        [sys.executable, "-m", "dsh", "sessions", "list", "--root", str(root), "--json"],
        capture_output=True, text=True, cwd=cwd, env=dsh_env(), timeout=60, preexec_fn=limit,
    )


def test_list_shows_a_log_with_a_200_mb_line_under_an_address_space_cap(tmp_path: Path) -> None:
    cwd, root = tmp_path / "project", tmp_path / "store"
    cwd.mkdir()
    log = _log_with_a_big_line(root, cwd)
    assert log.stat().st_size > BIG
    out = _list(cwd, root)
    assert out.returncode == 0, out.stderr[-2000:]
    [row] = json.loads(out.stdout)
    assert (row["id"], row["turns"], row["title"], row["corrupt"]) == ("big", 3, "first prompt", None)
    assert isinstance(row["lastActivity"], int)


@pytest.mark.perf
def test_list_of_a_200_mb_line_is_quick(tmp_path: Path) -> None:
    cwd, root = tmp_path / "project", tmp_path / "store"
    cwd.mkdir()
    _log_with_a_big_line(root, cwd)
    started = time.perf_counter()
    out = _list(cwd, root)
    assert out.returncode == 0, out.stderr[-2000:]
    assert time.perf_counter() - started < 5  # about 16 s before (dsh's own start-up is most of it now)
