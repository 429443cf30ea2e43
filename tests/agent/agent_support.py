"""Shared helpers for the agent-loop tests: log outlines, waiting, an in-memory store.

The rig (spine, scripted model) is the suite's one builder, :func:`tests.support.rig.make_rig`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from dsh.agent import Agent
from dsh.persistence.base import (
    AppendSeqMismatch,
    SessionExists,
    SessionInfo,
    SessionLocked,
    SessionNotFound,
    SessionStore,
    StoredSession,
)
from dsh.session import Event, Session, decode_event, encode_event, interrupted_turn_closers

IDENTITY = "You are an AI agent powered by the DeepSeek Harness SDK."


def text(value: str) -> list[dict[str, Any]]:
    """A one-block text content list."""
    return [{"type": "text", "text": value}]


def outline(session: Session) -> list[str]:
    """Event types in order, with each run of ``assistant/chunk`` folded to ``chunk*N``."""
    out: list[str] = []
    run = 0
    for event in session.events:
        if event.type == "assistant/chunk":
            run += 1
            continue
        if run:
            out.append(f"chunk*{run}")
            run = 0
        out.append(event.type)
    if run:
        out.append(f"chunk*{run}")
    return out


def of_type(session: Session, kind: str) -> list[Event]:
    return [e for e in session.events if e.type == kind]


def turn_ends(session: Session) -> list[dict[str, Any]]:
    return [e.data["reason"] for e in of_type(session, "turn/end")]


def chunk_types(session: Session) -> list[str]:
    return [e.data["chunk"]["type"] for e in of_type(session, "assistant/chunk")]


async def idle(agent: Agent, timeout: float = 5.0) -> None:
    await asyncio.wait_for(agent.when_idle(), timeout)


# -- an in-memory store ----------------------------------------------------------------------


class MemoryStore(SessionStore):
    """A store that keeps encoded lines in memory; ``load`` applies crash repair."""

    kind = "memory"

    def __init__(self) -> None:
        self.headers: dict[str, dict[str, Any]] = {}
        self.lines: dict[str, list[bytes]] = {}
        self.open: set[str] = set()
        self.fail_appends = 0
        self.appends = 0

    async def create(self, header: dict[str, Any]) -> None:
        session_id = header["id"]
        if session_id in self.open or session_id in self.lines:
            raise SessionExists(f'session "{session_id}" already exists in this backend')
        self.headers[session_id] = dict(header)
        self.open.add(session_id)

    async def append(self, session_id: str, events: Sequence[Event], *, sync: bool = True) -> None:
        if self.fail_appends:
            self.fail_appends -= 1
            raise OSError("disk full")
        lines = self.lines.setdefault(session_id, [])
        if events and events[0].seq != len(lines):
            raise AppendSeqMismatch(f"expected seq {len(lines)}, got {events[0].seq}")
        lines.extend(encode_event(e) for e in events)
        self.appends += 1

    async def load(self, session_id: str) -> StoredSession:
        if session_id not in self.lines:
            raise SessionNotFound(session_id)
        if session_id in self.open:
            raise SessionLocked(session_id)
        events = [decode_event(line) for line in self.lines[session_id]]
        closers = interrupted_turn_closers(events)
        self.lines[session_id].extend(encode_event(e) for e in closers)
        self.open.add(session_id)
        return StoredSession(self.headers[session_id], events + closers, repaired=len(closers))

    async def read(self, session_id: str) -> StoredSession:
        if session_id not in self.lines:
            raise SessionNotFound(session_id)
        events = [decode_event(line) for line in self.lines[session_id]]
        return StoredSession(self.headers[session_id], events)

    async def list(self, *, limit: int | None = None, offset: int = 0) -> list[SessionInfo]:
        infos = [SessionInfo(self.headers[i]) for i in self.lines if self.lines[i]]
        return infos[offset : None if limit is None else offset + limit]

    async def remove(self, session_id: str) -> None:
        if session_id in self.open:
            raise SessionLocked(session_id)
        self.lines.pop(session_id, None)
        self.headers.pop(session_id, None)

    def stored_count(self, session_id: str) -> int | None:
        if session_id not in self.open:
            return None
        return len(self.lines.get(session_id, ()))

    async def release(self, session_id: str) -> None:
        self.open.discard(session_id)

