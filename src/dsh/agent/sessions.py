"""The live-session service (``SESSIONS``): sessions published on the bus.

Owns the in-memory table of live sessions and the store-level bus events that persistence and
UIs listen to: ``session/created`` (emit, once), ``session/event`` (emit, after each commit),
``session/flush`` (an awaited parallel durability point), ``session/checkpoint`` (the same
without fsync, before each model call) and ``session/disposed`` (awaited parallel, so
a final drain completes before the session is forgotten). It does no I/O itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dsh import _clock
from dsh.runtime import Context, Hook, ServiceKey
from dsh.session import Event, ForkError, Session
from dsh.session.vocab import JsonObject

name = "sessions"


@dataclass(frozen=True, slots=True)
class SessionOnly:
    session: Session


@dataclass(frozen=True, slots=True)
class SessionEvent:
    session: Session
    event: Event


# Declared here, next to the service that dispatches them (dsh.agent.hooks re-exports them); store
# plugins listen to them to persist sessions.
SESSION_CREATED: Hook[SessionOnly] = Hook("session/created", SessionOnly)
SESSION_EVENT: Hook[SessionEvent] = Hook("session/event", SessionEvent)
SESSION_FLUSH: Hook[SessionOnly] = Hook("session/flush", SessionOnly)
SESSION_CHECKPOINT: Hook[SessionOnly] = Hook("session/checkpoint", SessionOnly)
SESSION_DISPOSED: Hook[SessionOnly] = Hook("session/disposed", SessionOnly)


@dataclass(frozen=True, slots=True)
class PersistStopped:
    """The store refused to write ``session_id`` any more (another program wrote to it)."""

    session_id: str
    error: BaseException


# Emitted by the write coordinator; an app counts the run as failed.
SESSION_PERSIST_STOPPED: Hook[PersistStopped] = Hook("session/persist-stopped", PersistStopped)


class SessionService:
    """Creates, adopts, flushes and disposes live sessions."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._live: dict[str, Session] = {}
        self._unsubscribe: dict[str, Callable[[], None]] = {}
        self._ids = itertools.count(1)

    def create(
        self,
        session_id: str | None = None,
        *,
        cwd: str | None = None,
        seed: Iterable[Event | Mapping[str, Any]] = (),
        parent_session: str | None = None,
    ) -> Session:
        """A new live session (nothing is written until the first flush)."""
        if session_id is None:
            session_id = f"session-{next(self._ids)}"
            while session_id in self._live:
                session_id = f"session-{next(self._ids)}"
        if session_id in self._live:
            raise ForkError(f'session "{session_id}" already exists', "SESSION_ALREADY_EXISTS")
        header: JsonObject = {"version": 0, "id": session_id, "createdAt": _clock.now_ms()}
        if cwd is not None:
            header["cwd"] = cwd
        seed = list(seed)
        if parent_session is not None:
            header["parentSession"] = parent_session
            header["seedLength"] = len(seed)
        return self.adopt(Session(session_id, seed, header=header))

    def adopt(self, session: Session) -> Session:
        """Publish an existing session object (a resumed or forked one) on the bus."""
        if session.id in self._live:
            raise ForkError(f'session "{session.id}" already exists', "SESSION_ALREADY_EXISTS")
        self._live[session.id] = session
        emit = self._ctx.emit
        # session/event is on the append hot path: dispatched by name, without a payload object.
        self._unsubscribe[session.id] = session.subscribe(
            lambda s, event: emit("session/event", s, event)
        )
        emit(SESSION_CREATED, SessionOnly(session))
        return session

    def get(self, session_id: str) -> Session | None:
        return self._live.get(session_id)

    def list(self) -> list[Session]:
        return list(self._live.values())

    async def flush(self, session: Session) -> None:
        """The durability checkpoint: every ``session/flush`` listener runs and is awaited."""
        await self._ctx.parallel(SESSION_FLUSH, SessionOnly(session))

    async def checkpoint(self, session: Session) -> None:
        """Write what is buffered without forcing it to disk (``session/checkpoint``).

        The loop checkpoints before each model call, so a process killed mid-call leaves the
        turn for crash repair instead of losing it; the turn-end flush makes it durable.
        """
        await self._ctx.parallel(SESSION_CHECKPOINT, SessionOnly(session))

    async def dispose(self, session: Session) -> None:
        """Final drain, then forget the session."""
        if self._live.get(session.id) is not session:
            return
        try:
            await self._ctx.parallel(SESSION_DISPOSED, SessionOnly(session))
        finally:
            self._live.pop(session.id, None)
            unsubscribe = self._unsubscribe.pop(session.id, None)
            if unsubscribe is not None:
                unsubscribe()


SESSIONS: ServiceKey[SessionService] = ServiceKey("sessions")
"""The live-session service (``ctx.require(SESSIONS)``)."""


def apply(ctx: Context, config: object = None) -> None:
    ctx.provide(SESSIONS, SessionService(ctx))
