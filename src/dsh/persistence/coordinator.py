"""The write path shared by every store plugin: buffer on append, write on flush.

Owns :func:`mount_coordinator` and :class:`WriteCoordinator` (docs/stores.md, "The write path"). The session
service announces sessions on the bus; the coordinator turns that into store calls:

- ``session/created(session)`` (sync emit): register the session. If the store does not track
  it yet, ``store.create(header)`` starts in the background (cursor 0); otherwise the cursor is
  the store's durable count (a resumed session). Seed events at or past the cursor are buffered
  for the first flush.
- ``session/event(session, event)`` (sync, on the append hot path): copy into the buffer.
- ``session/flush(session)`` (awaited, parallel): wait for the init, then write the buffered
  events with ``seq >= cursor`` in one ``store.append``; advance the cursor and drop them from
  the buffer only after it commits, so a failed flush is retried by the next one without
  duplicates or gaps. Work on one session id is serialised.
- ``session/disposed(session)`` (awaited): final drain, then ``store.release``. If the drain
  fails the error propagates and the session stays registered for the disposal to retry.
- Fiber disposal: wait for pending work, drain every session, release, close the store. All
  failures are raised together as ``ExceptionGroup("<kind> dispose failed", [...])``.
- A store that finds the session changed by another program (:class:`SessionModified`) has
  stopped writing it: the coordinator logs its one line once, drops what is buffered and every
  later event of that session, and releases it on disposal without an error (the other
  program's writes stay as they are; the conversation goes on in memory only) and emits
  ``session/persist-stopped(session_id, error)`` so an app can report the run as failed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from dsh.persistence.base import SessionModified
from dsh.session import Event, Session

if TYPE_CHECKING:
    from dsh.persistence.base import SessionStore

log = logging.getLogger("dsh.persistence")

__all__ = ["PluginContext", "WriteCoordinator", "mount_coordinator"]


class PluginContext(Protocol):
    """The part of ``dsh.runtime.Context`` that store plugins use."""

    def on(self, event: str, listener: Callable[..., Any]) -> Callable[[], None]: ...

    def provide(self, name: str, service: object) -> None: ...

    def defer(self, disposer: Callable[[], object]) -> None: ...

    def emit(self, event: str, *args: Any) -> None: ...


@dataclass
class _SessionState:
    session_id: str
    header: dict[str, Any]
    cursor: int = 0
    """Events with ``seq < cursor`` are durable."""
    buffer: list[Event] = field(default_factory=list)
    buffered_upto: int = 0
    """One past the highest seq ever buffered (guards against a replayed event)."""
    needs_create: bool = False
    init_task: asyncio.Task[None] | None = None
    disposed: bool = False
    stopped: bool = False
    """Another program wrote to the session: nothing more is written for it."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class WriteCoordinator:
    """Per-session buffers and cursors in front of one :class:`SessionStore`."""

    def __init__(
        self,
        store: SessionStore,
        *,
        close_store: bool = True,
        on_stopped: Callable[[str, SessionModified], object] | None = None,
    ) -> None:
        self.store = store
        self.on_stopped = on_stopped
        self.close_store = close_store
        self._states: dict[str, _SessionState] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- bus listeners -----------------------------------------------------------------------

    def on_created(self, session: Session) -> None:
        existing = self._states.get(session.id)
        if existing is not None and not existing.disposed:
            return
        self._register(session)

    def on_event(self, session: Session, event: Event) -> None:
        state = self._states.get(session.id)
        if state is None:
            self._register(session)  # buffers everything the session holds, this event included
            return
        if event.seq >= state.buffered_upto and not state.stopped:
            state.buffer.append(event)
            state.buffered_upto = event.seq + 1

    async def on_flush(self, session: Session) -> None:
        state = self._states.get(session.id) or self._register(session)
        async with state.lock:
            await self._drain(state)

    async def on_checkpoint(self, session: Session) -> None:
        """Like a flush, but written without fsync (survives a killed process, not power loss)."""
        state = self._states.get(session.id) or self._register(session)
        async with state.lock:
            await self._drain(state, sync=False)

    async def on_disposed(self, session: Session) -> None:
        state = self._states.get(session.id)
        if state is None:
            return
        state.disposed = True
        task = self._spawn(self._finish(state))
        if task is not None:
            # Shielded: a cancelled caller does not cut the final drain short; the store
            # disposal waits for it.
            await asyncio.shield(task)

    # -- internals ---------------------------------------------------------------------------

    def _register(self, session: Session) -> _SessionState:
        count = self.store.stored_count(session.id)
        state = _SessionState(session.id, dict(session.header))
        events = session.events
        if count is None:
            state.needs_create = True
        else:
            state.cursor = count
        state.buffer = events[state.cursor :] if state.cursor < len(events) else []
        state.buffered_upto = len(events)
        self._states[session.id] = state
        if state.needs_create:
            task = self._spawn(self._init(state))
            state.init_task = task
        return state

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()  # no loop (a sync caller): the next flush or the disposal does the work
            return None
        task: asyncio.Task[None] = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _init(self, state: _SessionState) -> None:
        if self.store.stored_count(state.session_id) is None:
            await self.store.create(state.header)
        state.needs_create = False

    async def _ensure_init(self, state: _SessionState) -> None:
        task, state.init_task = state.init_task, None
        if task is not None:
            await task  # a failure propagates; needs_create stays set, so the next flush retries
        elif state.needs_create:
            await self._init(state)

    async def _drain(self, state: _SessionState, *, sync: bool = True) -> None:
        """Write what is buffered past the cursor (caller holds ``state.lock``)."""
        if state.stopped:
            return
        await self._ensure_init(state)
        stored = self.store.stored_count(state.session_id)
        if stored is not None and stored > state.cursor:
            state.cursor = stored  # written by someone else through the store (e.g. repair)
        cursor = state.cursor
        # A copy: events appended while the write is in flight must not join this batch.
        pending = [event for event in state.buffer if event.seq >= cursor]
        if pending:
            try:
                await self.store.append(state.session_id, pending, sync=sync)
            except SessionModified as exc:
                state.stopped = True
                state.buffer = []
                log.error("%s", exc)
                if self.on_stopped is not None:
                    self.on_stopped(state.session_id, exc)
                return
            state.cursor = pending[-1].seq + 1
        # Events appended while the write was in flight stay buffered.
        cursor = state.cursor
        state.buffer = [event for event in state.buffer if event.seq >= cursor]

    async def _finish(self, state: _SessionState) -> None:
        async with state.lock:
            try:
                await self._drain(state)
            except Exception as exc:
                # The session stays registered: the store disposal retries the drain.
                log.warning(
                    "session %s: final flush failed (retried when the store is disposed): %s",
                    state.session_id,
                    exc,
                )
                raise
            if self._states.get(state.session_id) is state:  # not re-created meanwhile
                del self._states[state.session_id]
                await self.store.release(state.session_id)

    async def dispose(self) -> None:
        """Final drain of every session, release, close; failures aggregated."""
        errors: list[Exception] = []
        while self._tasks:
            # Init failures resurface in the drain below (which retries them); final-flush
            # tasks log their own failure and leave the session here for that same drain.
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for state in list(self._states.values()):
            async with state.lock:
                try:
                    await self._drain(state)
                except Exception as exc:
                    errors.append(exc)
            try:
                await self.store.release(state.session_id)
            except Exception as exc:
                errors.append(exc)
        self._states.clear()
        if self.close_store:
            try:
                await self.store.close()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise ExceptionGroup(f"{self.store.kind} dispose failed", errors)


def mount_coordinator(
    ctx: PluginContext, store: SessionStore, *, close_store: bool = True
) -> WriteCoordinator:
    """Listen to the session bus events on ``ctx`` and write them to ``store``.

    Called by a store plugin's ``apply``; the listeners and the final drain belong to that
    plugin's fiber. With ``close_store`` the disposal also closes the store.
    """
    coordinator = WriteCoordinator(
        store,
        close_store=close_store,
        on_stopped=lambda session_id, exc: ctx.emit("session/persist-stopped", session_id, exc),
    )
    ctx.on("session/created", coordinator.on_created)
    ctx.on("session/event", coordinator.on_event)
    ctx.on("session/flush", coordinator.on_flush)
    ctx.on("session/checkpoint", coordinator.on_checkpoint)
    ctx.on("session/disposed", coordinator.on_disposed)
    ctx.defer(coordinator.dispose)
    return coordinator
