"""The open/load/repair flow of the stores whose backend calls block (JSONL files, SQLite).

Owns :class:`LocalStore`: ``create`` (check the header, take the writer lock, refuse a persisted
id, track), ``append`` (check and encode the batch, write it, advance the count), ``load`` (take
the lock, parse and validate, truncate the torn tail and append crash closers, track, then
refresh the fold snapshot on the worker thread after returning), ``read``/``export``/``remove``/
``release``/``close``, written once over the small backend primitives a subclass supplies (the
``_``-prefixed abstract methods below).

Every blocking call (file I/O, ``fsync``, SQLite) runs on the store's one worker thread, so the
event loop keeps running while a flush waits for the disk. One thread keeps the calls in the
order they were made (a SQLite connection is used by one thread at a time) and the durability
unchanged: an ``append`` still returns only once its bytes are on stable storage.
"""

from __future__ import annotations

import abc
import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, ParamSpec, TypeVar

from dsh.persistence._fold import MIN_EVENTS
from dsh.persistence._locks import WriterLock, acquire
from dsh.persistence._v0 import encode_event_lines, make_header
from dsh.persistence.base import (
    SessionExists,
    SessionInfo,
    StoredSession,
    Tracked,
    TrackingStore,
)
from dsh.session import Event, Session
from dsh.session.vocab import JsonObject

log = logging.getLogger("dsh.persistence")

T = TypeVar("T")
P = ParamSpec("P")


@dataclass(kw_only=True)
class LocalTracked(Tracked):
    """A tracked session and the writer lock file that keeps other dsh processes out."""

    lock: WriterLock


@dataclass(kw_only=True)
class Parsed:
    """A validated log: the preserved events, then the crash closers when repairing."""

    header: JsonObject
    events: Sequence[Event]
    session: Session
    closers: list[Event]
    torn_bytes: int = 0
    folded: int = 0
    """How many events a fold snapshot covered (0: none was used)."""


TrackedT = TypeVar("TrackedT", bound=LocalTracked)
ParsedT = TypeVar("ParsedT", bound=Parsed)


class LocalStore(TrackingStore[TrackedT], Generic[TrackedT, ParsedT]):
    """A store over blocking primitives, run on one worker thread (see the module docstring)."""

    lock_dir: str

    def __init__(self) -> None:
        super().__init__()
        self._worker: ThreadPoolExecutor | None = None

    async def _run(self, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"dsh-{self.kind}-store")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, functools.partial(call, *args, **kwargs))

    # -- backend primitives (blocking; called on the worker thread) ---------------------------

    def _prepare(self) -> None:
        """Open what ``create`` needs (a database connection); no-op by default."""

    @abc.abstractmethod
    def _persisted(self, session_id: str) -> bool:
        """Whether the session has a persisted log (under its lock: a definite answer)."""

    @abc.abstractmethod
    def _require(self, session_id: str) -> None:
        """Raise :class:`SessionNotFound` (creating nothing) when there is no log to load."""

    @abc.abstractmethod
    def _track_new(self, header: JsonObject, lock: WriterLock) -> TrackedT:
        """The tracking entry of a created session (nothing written yet)."""

    @abc.abstractmethod
    def _write(self, entry: TrackedT, events: Sequence[Event], lines: list[bytes], sync: bool) -> None:
        """Write checked lines: the first write materialises the log; later ones first check
        that nobody else wrote (:class:`SessionModified`)."""

    @abc.abstractmethod
    def _parse(self, session_id: str, *, repair: bool) -> ParsedT:
        """Read and validate the committed log; compute the closers when ``repair``. No writes."""

    @abc.abstractmethod
    def _fix_tail(self, session_id: str, parsed: ParsedT, lock: WriterLock) -> TrackedT:
        """Cut the torn tail and append the closers, durably; the entry that tracks the result."""

    @abc.abstractmethod
    def _fold_writer(self, session_id: str, parsed: ParsedT) -> Callable[[], None]:
        """What writing a fold snapshot of the loaded log takes (see :meth:`_fold_due`), the
        session's fold taken now: the caller runs it later, on the worker thread."""

    @abc.abstractmethod
    def _committed_bytes(self, parsed: ParsedT) -> bytes:
        """The committed log as JSONL v0 bytes (header line, event lines)."""

    @abc.abstractmethod
    def _list(self, limit: int | None, offset: int) -> list[SessionInfo]: ...

    @abc.abstractmethod
    def _delete(self, session_id: str) -> None:
        """Delete a persisted session (the caller holds its lock)."""

    def _untrack(self, entry: TrackedT) -> None:
        """Close what the entry holds besides its lock (a file descriptor)."""

    def _shutdown(self) -> None:
        """Close shared resources (a database connection) after every session is released."""

    # -- the flow, written once --------------------------------------------------------------

    def _create_sync(self, header: JsonObject) -> None:
        clean = make_header(header)
        session_id = self._untracked(clean["id"])
        self._prepare()
        lock = acquire(self.lock_dir, session_id)
        try:
            if self._persisted(session_id):
                raise SessionExists.persisted(session_id)
            entry = self._track_new(clean, lock)
        except BaseException:
            lock.release()
            raise
        self._open[session_id] = entry

    def _append_sync(self, session_id: str, events: Sequence[Event], sync: bool) -> None:
        entry = self._tracked(session_id)
        entry.check_writable()
        lines = encode_event_lines(session_id, events, entry.count)
        if lines:
            self._write(entry, events, lines, sync)
            entry.count += len(lines)

    def _load_sync(self, session_id: str) -> tuple[StoredSession, Callable[[], None] | None]:
        self._untracked(session_id)
        self._require(session_id)  # fail fast, creating nothing, when there is no log
        lock = acquire(self.lock_dir, session_id)
        try:
            parsed = self._parse(session_id, repair=True)
            entry = self._fix_tail(session_id, parsed, lock)
        except BaseException:
            lock.release()
            raise
        write_fold = self._fold_writer(session_id, parsed) if self._fold_due(parsed) else None
        self._open[session_id] = entry
        stored = StoredSession(
            header=parsed.header,
            events=parsed.events,
            repaired=len(parsed.closers),
            truncated_bytes=parsed.torn_bytes,
            session=parsed.session,
        )
        return stored, write_fold

    @staticmethod
    def _fold_due(parsed: Parsed) -> bool:
        """Whether a snapshot would spare the next load real work: a log of :data:`MIN_EVENTS`
        or more that ends at a ``turn/end`` (a resume from it needs no look back into the
        prefix), not already covered nearly all by the snapshot in place."""
        session = parsed.session
        count = len(session)
        return (
            count >= MIN_EVENTS
            and count - parsed.folded >= 64
            and session.events[count - 1].type == "turn/end"
        )

    def _read_sync(self, session_id: str) -> StoredSession:
        parsed = self._parse(session_id, repair=False)
        return StoredSession(header=parsed.header, events=parsed.events, session=parsed.session)

    def _export_sync(self, session_id: str) -> bytes:
        return self._committed_bytes(self._parse(session_id, repair=False))

    def _remove_sync(self, session_id: str) -> None:
        self._refuse_if_tracked(session_id)
        self._require(session_id)
        lock = acquire(self.lock_dir, session_id)
        try:
            self._delete(session_id)
        finally:
            lock.release()

    def _release_sync(self, session_id: str) -> None:
        entry = self._open.pop(session_id, None)
        if entry is None:
            return
        try:
            self._untrack(entry)
        finally:
            entry.lock.release()

    def _close_sync(self) -> None:
        errors: list[Exception] = []
        for session_id in list(self._open):
            try:
                self._release_sync(session_id)
            except Exception as exc:
                errors.append(exc)
        self._shutdown()
        if errors:
            raise ExceptionGroup(f"{self.kind} store close failed", errors)

    # -- the contract --------------------------------------------------------------------------

    async def create(self, header: JsonObject) -> None:
        await self._run(self._create_sync, header)

    async def append(self, session_id: str, events: Sequence[Event], *, sync: bool = True) -> None:
        await self._run(self._append_sync, session_id, events, sync)

    async def load(self, session_id: str) -> StoredSession:
        stored, write_fold = await self._run(self._load_sync, session_id)
        if write_fold is not None and self._worker is not None:
            # A cache the caller does not wait for: written on the worker thread after the load
            # returns and before any later call of this store runs there.
            self._worker.submit(_quietly, write_fold)
        return stored

    async def read(self, session_id: str) -> StoredSession:
        return await self._run(self._read_sync, session_id)

    async def export(self, session_id: str) -> bytes:
        return await self._run(self._export_sync, session_id)

    async def list(self, *, limit: int | None = None, offset: int = 0) -> list[SessionInfo]:
        return await self._run(self._list, limit, offset)

    async def remove(self, session_id: str) -> None:
        await self._run(self._remove_sync, session_id)

    async def release(self, session_id: str) -> None:
        await self._run(self._release_sync, session_id)

    async def close(self) -> None:
        try:
            await self._run(self._close_sync)
        finally:
            worker, self._worker = self._worker, None
            if worker is not None:
                worker.shutdown(wait=False)


def _quietly(call: Callable[[], None]) -> None:
    """Run a fold snapshot's write; a failure only leaves no snapshot (logged)."""
    try:
        call()
    except Exception:
        log.exception("writing a fold snapshot failed")
