"""``dsh.Agent.rewind``: the rewind operations on a composition's live session or its store.

Owns appending the ``workspace/rewind`` event to the right session: the live one when this
process holds it (then flushed), else the stored one under its writer lock; and storing a forked
conversation. The operations themselves are :mod:`dsh.rewind.ops`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from dsh.agent.sessions import SESSIONS
from dsh.persistence.base import SESSION_STORE
from dsh.rewind import ops
from dsh.rewind.history import REWIND
from dsh.runtime import Context
from dsh.session import Session

__all__ = ["RewindResult", "rewind_session"]


@dataclass(frozen=True)
class RewindResult:
    """``session_id``: the session that continues (a new one after a conversation rewind, with
    no stored event when it rewound to before turn 1); ``restored``: the files put back."""

    session_id: str
    restored: tuple[str, ...]
    forked: bool


async def rewind_session(
    ctx: Context, live: Session | None, session_id: str, turn: int, *, files: bool, conversation: bool, force: bool
) -> RewindResult:
    if not files and not conversation:
        raise ValueError("rewind: choose files=True, conversation=True or both")
    store = ctx.get(SESSION_STORE)
    if live is not None:
        header, events = dict(live.header), list(live.events)
    elif store is not None:
        stored = await store.read(session_id)
        header, events = dict(stored.header), list(stored.events)
    else:
        raise KeyError(f'session "{session_id}" is not open here and no store is mounted')
    data: dict[str, Any] | None = None
    if files:
        data = await asyncio.to_thread(ops.restore_files, header, events, turn, force=force)
    restored = tuple(data["restored"]) if data else ()
    if not conversation:
        if data is not None:
            await _append(ctx, live, session_id, data)
        return RewindResult(session_id, restored, False)
    new_header, kept = ops.fork_events(header, events, turn)
    new_id = str(new_header["id"])
    if data is not None:
        kept = [*kept, Session.restore(new_id, kept, header=new_header).append(REWIND, data)]
    if kept and store is not None:
        await store.create(new_header)
        try:
            await store.append(new_id, kept)
        finally:
            await store.release(new_id)
        await asyncio.to_thread(ops.keep_for, new_header, new_id, kept)
    return RewindResult(new_id, restored, True)


async def _append(ctx: Context, live: Session | None, session_id: str, data: dict[str, Any]) -> None:
    if live is not None:
        live.append(REWIND, data)
        await ctx.require(SESSIONS).flush(live)
        return
    store = ctx.require(SESSION_STORE)
    stored = await store.load(session_id)
    try:
        session = stored.live()
        await store.append(session_id, [session.append(REWIND, data)])
    finally:
        await store.release(session_id)
