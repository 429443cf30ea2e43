"""The session-store contract shared by the JSONL, SQLite and PostgreSQL backends.

Owns :class:`SessionStore` (what a backend must do), the records it returns, the errors a
user can meet, with the reference's texts, and :class:`TrackingStore` (the table of sessions a
backend writes). Behaviour: docs/stores.md.

Writing is single-owner: ``create`` and ``load`` take the session's writer lock (a lock that
dies with its process), ``read`` and ``list`` take none and never repair, so read-only commands
work while another process writes.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from dsh.runtime.keys import ServiceKey
from dsh.session import Event, Session, encode_event, to_json
from dsh.session.vocab import JsonObject


class StoreError(Exception):
    """Base of every store error; its text is one line meant for a person."""


class SessionNotFound(StoreError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f'session "{session_id}" not found')
        self.session_id = session_id


class SessionExists(StoreError):
    """``create`` of an id that is tracked or already persisted."""

    @classmethod
    def tracked(cls, session_id: str) -> SessionExists:
        """The id is already open in this store object."""
        return cls(f'session "{session_id}" already exists in this backend')

    @classmethod
    def persisted(cls, session_id: str) -> SessionExists:
        """The id already has a committed log in this backend."""
        return cls(
            f'session "{session_id}" already has a persisted log on disk; '
            "load/resume it instead of creating"
        )


class SessionLocked(StoreError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f'session "{session_id}" is open in another process')
        self.session_id = session_id


class CorruptSessionLog(StoreError):
    """A committed region that cannot be trusted.

    Messages are the reference's, ``corrupt session log: <what> at line <n>`` (``n`` counts event
    lines, as the reference does), followed by where in brackets (the path and the file line, or
    the database and session id), except a log with no complete header line: ``empty or
    header-less session log: <where>``. Raising it never modifies the log.
    """


class AppendSeqMismatch(StoreError):
    """``append`` whose first seq is not the stored next seq (a racing or confused writer)."""


class SessionModified(AppendSeqMismatch):
    """The log changed under a writer that holds its lock: another program wrote to it.

    The writer stops writing that session (every later append raises this again) and leaves
    the log exactly as the other program left it.
    """

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f'session "{session_id}" was modified by another program; dsh stopped writing to it'
        )
        self.session_id = session_id


class StoreUnavailable(StoreError):
    """The store's server could not be reached (raised at start-up: the command refuses to run)."""


class UnsupportedVersion(StoreError):
    """A session header (or a database schema) written by a format this build cannot read."""


class InvalidSessionId(StoreError, ValueError):
    """An id a store cannot hold: empty, not a string, or too long once encoded as a file name."""


@dataclass(frozen=True)
class StoredSession:
    """A loaded session: its header mapping (``version, id, createdAt, cwd?, ...``) and events."""

    header: dict[str, Any]
    events: Sequence[Event]
    """Every event in seq order (a session resumed from a fold snapshot decodes them lazily)."""
    repaired: int = 0
    """How many crash-repair closers ``load`` appended."""
    truncated_bytes: int = 0
    """How many torn bytes ``load`` cut from the tail."""
    session: Session | None = None
    """The validated live session, when the store built one while checking the log (its
    ``events`` equal :attr:`events`). Callers may adopt it instead of folding the log again."""

    def live(self) -> Session:
        """The session the store built, or one folded from :attr:`events` when it built none."""
        if self.session is not None:
            return self.session
        return Session.restore(str(self.header["id"]), list(self.events), header=self.header)


@dataclass(frozen=True)
class SessionInfo:
    """What ``list`` returns: the header and cheap facts, never the events."""

    header: dict[str, Any]
    location: str | None = None
    modified_ms: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return str(self.header["id"])

    @property
    def created_at(self) -> int:
        return int(self.header["createdAt"])


class SessionStore(abc.ABC):
    """A durable home for session logs. One writer per session, any number of readers."""

    kind: str = "abstract"

    def locate(self, header: dict[str, Any]) -> str | None:
        """Where the session's artifact lives (no I/O); ``None`` when not file-shaped."""
        return None

    @abc.abstractmethod
    async def create(self, header: JsonObject) -> None:
        """Register a new session lazily (nothing written) and take its writer lock.

        Raises :class:`SessionExists` (``session "<id>" already exists in this backend`` /
        ``session "<id>" already has a persisted log on disk; load/resume it instead of
        creating``) or :class:`SessionLocked`.
        """

    @abc.abstractmethod
    async def append(self, session_id: str, events: Sequence[Event], *, sync: bool = True) -> None:
        """Append contiguous events; the first seq must equal the stored next seq.

        With ``sync`` (the default) they are on stable storage when this returns. Without it they
        are written, so they survive the process being killed, but not forced to disk: a
        checkpoint. The next synced append makes them durable too.
        """

    @abc.abstractmethod
    async def load(self, session_id: str) -> StoredSession:
        """Take the writer lock, validate, truncate a torn tail, append crash closers durably."""

    @abc.abstractmethod
    async def read(self, session_id: str) -> StoredSession:
        """Read-only view of the committed log: no lock, no repair, no writes."""

    @abc.abstractmethod
    async def list(self, *, limit: int | None = None, offset: int = 0) -> list[SessionInfo]:
        """Headers of persisted sessions (zero-event sessions absent), newest first."""

    @abc.abstractmethod
    async def remove(self, session_id: str) -> None:
        """Delete a persisted session (fails with :class:`SessionLocked` while it is open)."""

    @abc.abstractmethod
    def stored_count(self, session_id: str) -> int | None:
        """Events already durable for a session this store tracks, ``None`` if untracked."""

    @abc.abstractmethod
    async def release(self, session_id: str) -> None:
        """Stop tracking a session and drop its writer lock."""

    async def close(self) -> None:  # noqa: B027 - optional
        """Release every lock and connection."""

    async def export(self, session_id: str) -> bytes:
        """The committed log in the JSONL v0 format (header line, one line per event).

        Read-only like :meth:`read`. The default re-encodes what ``read`` returns, which is
        byte-identical for logs that dsh or the reference wrote.
        """
        stored = await self.read(session_id)
        lines = [to_json({"type": "session", **stored.header}).encode()]
        lines.extend(encode_event(event) for event in stored.events)
        return b"\n".join(lines) + b"\n"

    async def import_session(self, header: Mapping[str, object], events: Sequence[Event]) -> None:
        """Persist a whole session taken from another store or an exported file.

        Checked as ``create`` and ``append`` check (the header normalised, seqs contiguous from
        0, every line lossless); the id must not be persisted here. Events keep their exact
        lines, so an export from here is byte-identical to the source. An empty log writes
        nothing, as a never-flushed session leaves nothing.
        """
        session_id = str(header.get("id"))
        await self.create(dict(header))
        try:
            if events:
                await self.append(session_id, list(events))
        finally:
            await self.release(session_id)

    def follow(self, session_id: str, after_seq: int) -> AsyncIterator[Event] | None:
        """Events appended after ``after_seq`` by any process, live; ``None`` if unsupported."""
        return None


@dataclass(kw_only=True, eq=False)
class Tracked:
    """A session a store writes: its header, how many events are durable, whether it may write."""

    header: JsonObject
    count: int = 0
    broken: StoreError | None = None
    """Set once writing must stop (another program wrote, or a failed append left doubt)."""

    def check_writable(self) -> None:
        """Raise the error that stopped this session's writing, if any (again, on every append)."""
        if self.broken is not None:
            raise self.broken.with_traceback(None)


TrackedT = TypeVar("TrackedT", bound=Tracked)


class TrackingStore(SessionStore, Generic[TrackedT]):
    """A store that tracks the sessions it writes by id: ``create`` and ``load`` add one,
    ``release`` drops it. Owns the lookups and texts every backend shares."""

    def __init__(self) -> None:
        self._open: dict[str, TrackedT] = {}

    def _untracked(self, session_id: str) -> str:
        """``session_id``, unless this store already writes it (:class:`SessionExists`)."""
        if session_id in self._open:
            raise SessionExists.tracked(session_id)
        return session_id

    def _tracked(self, session_id: str) -> TrackedT:
        """The entry of a session this store writes, else :class:`StoreError`."""
        entry = self._open.get(session_id)
        if entry is None:
            raise StoreError(f'session "{session_id}" is not open in this backend')
        return entry

    def _refuse_if_tracked(self, session_id: str) -> None:
        """Raise :class:`SessionLocked` while this store writes the session."""
        if session_id in self._open:
            raise SessionLocked(session_id)

    def stored_count(self, session_id: str) -> int | None:
        entry = self._open.get(session_id)
        return None if entry is None else entry.count


SESSION_STORE: ServiceKey[SessionStore] = ServiceKey("session_store")
"""The mounted store (``ctx.get(SESSION_STORE)``)."""
