"""Shared helpers for the store tests (imported by ``conftest.py``, the tests and ``_child.py``).

Builds stores from a JSON-able spec (so a child process can build the same store), builds valid
sessions with the real :class:`~dsh.session.Session`, and drives a child process.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsh.persistence.base import SessionStore
from dsh.session import Session

CHILD = str(Path(__file__).with_name("_child.py"))
PG_DSN = os.environ.get("DSH_TEST_DATABASE_URL", "postgresql://127.0.0.1:5432/test")


@dataclass
class Backend:
    """How to build stores of one kind over one location (and describe it to a child process)."""

    kind: str
    spec: dict[str, Any]
    stores: list[SessionStore] = field(default_factory=list)

    def make(self) -> SessionStore:
        store = build_store(self.spec)
        self.stores.append(store)
        return store


def build_store(spec: dict[str, Any]) -> SessionStore:
    kind = spec["kind"]
    if kind == "jsonl":
        from dsh.persistence.jsonl import JsonlStore

        return JsonlStore(spec["root"])
    if kind == "sqlite":
        from dsh.persistence.sqlite import SqliteStore

        return SqliteStore(spec["path"])
    if kind == "postgres":
        from dsh.persistence.postgres import PostgresStore

        return PostgresStore(dsn=spec["dsn"], schema=spec["schema"])
    raise ValueError(kind)


# -- building sessions -------------------------------------------------------------------------

USER = {"kind": "user"}


def header_of(session: Session) -> dict[str, Any]:
    return dict(session.header)


def closed_turn(session: Session, text: str = "hello") -> None:
    """A complete turn: user message, one step streaming one chunk, assistant reply."""
    turn = session.last_turn + 1
    session.append("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": USER}})
    session.append(
        "user/message",
        {"content": [{"type": "text", "text": text}], "source": USER},
        surface_op="append",
    )
    session.append("step/start", {"turn": turn, "step": 1})
    chunk = session.append(
        "assistant/chunk",
        {"turn": turn, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": text}},
    )
    session.append(
        "assistant/message",
        {"turn": turn, "step": 1, "content": [{"type": "text", "text": f"re: {text}"}]},
        surface_op="append",
        source_event_seqs=[chunk.seq],
    )
    session.append("step/end", {"turn": turn, "step": 1})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


def open_tool_turn(session: Session) -> None:
    """A turn left open by a crash after a logged tool call (no result, step open)."""
    turn = session.last_turn + 1
    session.append("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": USER}})
    session.append(
        "user/message",
        {"content": [{"type": "text", "text": "echo hi"}], "source": USER},
        surface_op="append",
    )
    session.append("step/start", {"turn": turn, "step": 1})
    session.append(
        "assistant/message",
        {
            "turn": turn,
            "step": 1,
            "content": [
                {"type": "text", "text": "calling"},
                {"type": "tool-call", "id": "call-1", "name": "echo", "arguments": "{}"},
            ],
        },
        surface_op="append",
    )
    session.append(
        "tool/call",
        {"turn": turn, "step": 1, "callId": "call-1", "name": "echo", "arguments": "{}"},
    )


def make_session(
    session_id: str,
    *,
    turns: int = 1,
    cwd: str | None = "/home/dev/p",
    created_at: int = 1_783_990_800_000,
) -> Session:
    header: dict[str, Any] = {"version": 0, "id": session_id, "createdAt": created_at}
    if cwd is not None:
        header["cwd"] = cwd
    session = Session(session_id, header=header)
    for index in range(turns):
        closed_turn(session, f"message {index}")
    return session


async def persist(store: SessionStore, session: Session, *, release: bool = True) -> None:
    await store.create(header_of(session))
    await store.append(session.id, list(session.events))
    if release:
        await store.release(session.id)


def events_json(events: Any) -> list[dict[str, Any]]:
    return [event.to_json() for event in events]


# -- a child process holding or probing a store ------------------------------------------------


class Child:
    """``python _child.py <spec> <action> <id>`` with line-based stdout."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def line(self, timeout: float = 30) -> str:
        assert self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        if not raw:
            err = b""
            if self.proc.stderr is not None:
                err = await self.proc.stderr.read()
            raise AssertionError(f"child exited early: {err.decode(errors='replace')}")
        return raw.decode().strip()

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()

    async def wait(self) -> int:
        return await self.proc.wait()


async def spawn_child(spec: dict[str, Any], action: str, session_id: str) -> Child:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        CHILD,
        json.dumps(spec),
        action,
        session_id,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    return Child(proc)
