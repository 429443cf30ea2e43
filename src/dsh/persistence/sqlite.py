"""The SQLite session store and its plugin (contracts §2.4).

Owns :class:`SqliteStore`: the schema (``PRAGMA user_version = 4``, WAL), one transaction per
append, the ``sessions`` row written by the first append (a session created but never flushed
leaves nothing), and load with the JSONL store's corruption and crash-repair rules applied per
row. Writer locks are ``flock`` files beside the database, in ``<db>.locks/``.

Each ``events`` row keeps the exact compact JSON line (``line``) that the JSONL store would write,
and ``sessions.header`` the exact header line, so :meth:`SqliteStore.export` is byte-identical to
the JSONL file of the same session. ``line`` is the record of truth; ``type``, ``time``, ``data``,
``source_event_seqs`` and ``surface_op`` are a queryable projection of it. Corruption messages read
``corrupt session log: ... at row <n> (<db> (session "<id>"))`` where row ``n`` (1-based) holds
seq ``n - 1``.

Plugin: ``name = "sqlite-sessions"``, config ``{path}`` (required), provides ``session_store``.
"""

from __future__ import annotations

import os
import sqlite3
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from dsh import _json
from dsh.persistence._fold import (
    MIN_EVENTS,
    Fold,
    digest_parts,
    line_starts,
    load_fold,
    remove_fold,
    write_fold,
)
from dsh.persistence._locks import WriterLock, acquire
from dsh.persistence._paths import encode_session_id, ensure_private_dir
from dsh.persistence._v0 import (
    check_header,
    corrupt,
    encode_event_lines,
    gc_paused,
    header_line,
    make_header,
    parse_header,
    restore_log,
    scan_event_lines,
)
from dsh.persistence.base import (
    SessionExists,
    SessionInfo,
    SessionLocked,
    SessionModified,
    SessionNotFound,
    SessionStore,
    StoredSession,
    StoreError,
    UnsupportedVersion,
)
from dsh.persistence.coordinator import PluginContext, mount_coordinator
from dsh.session import Event, Session, encode_event
from dsh.session.log import RawEvents

__all__ = ["SCHEMA_VERSION", "Config", "SqliteStore", "apply", "inject", "name"]

SCHEMA_VERSION = 4

_SCHEMA = """
CREATE TABLE sessions(
    id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    cwd TEXT,
    parent_session TEXT,
    seed_length INTEGER,
    header TEXT NOT NULL
);
CREATE TABLE events(
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    time INTEGER NOT NULL,
    data TEXT NOT NULL,
    source_event_seqs TEXT,
    surface_op TEXT,
    line TEXT NOT NULL,
    PRIMARY KEY(session_id, seq)
) WITHOUT ROWID;
CREATE INDEX sessions_by_created ON sessions(created_at DESC, id);
"""


@dataclass
class _OpenSession:
    header: dict[str, Any]
    lock: WriterLock
    count: int = 0
    materialised: bool = False
    last_line: str | None = None
    """The line of seq ``count - 1`` as this writer wrote or loaded it."""
    broken: SessionModified | None = None


@dataclass
class _Parsed:
    header: dict[str, Any]
    events: Sequence[Event]
    """The preserved events, then the closers (when repairing)."""
    session: Session
    closers: list[Event]
    rows: int
    torn_bytes: int
    prefix: list[bytes]
    """The header line and, when a snapshot was used, the lines it covers (newline-ended)."""
    lines: list[bytes]
    """The preserved lines after ``prefix``."""
    folded: int = 0
    """How many events the snapshot covered (0: none was used)."""
    starts: array[int] | None = None
    """The snapshot's line starts, when one was used."""


class SqliteStore(SessionStore):
    """Session logs as rows of one SQLite database file (see the module docstring)."""

    kind = "sqlite"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        self.lock_dir = self.path + ".locks"
        self.fold_dir = self.path + ".folds"
        self._db: sqlite3.Connection | None = None
        self._open: dict[str, _OpenSession] = {}

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"

    # -- connection --------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        ensure_private_dir(os.path.dirname(self.path))
        if not os.path.exists(self.path):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                pass
            else:
                os.fchmod(fd, 0o600)  # SQLite gives -wal and -shm the database file's mode
                os.close(fd)
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10)
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = FULL")
            self._migrate(db)
        except BaseException:
            db.close()
            raise
        self._db = db
        return db

    def _migrate(self, db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            (version,) = db.execute("PRAGMA user_version").fetchone()
            if version == 0:
                tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if tables:
                    raise UnsupportedVersion(
                        f"{self.path} is not a dsh session database (user_version 0, not empty)"
                    )
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version != SCHEMA_VERSION:
                raise UnsupportedVersion(
                    f"unsupported session database schema version {version} in {self.path} "
                    f"(expected {SCHEMA_VERSION})"
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _where(self, session_id: str) -> str:
        return f'{self.path} (session "{session_id}")'

    # -- writing -----------------------------------------------------------------------------

    async def create(self, header: dict[str, Any]) -> None:
        clean = make_header(header)
        session_id: str = clean["id"]
        if session_id in self._open:
            raise SessionExists(f'session "{session_id}" already exists in this backend')
        db = self._conn()
        lock = acquire(self.lock_dir, session_id)
        try:
            row = db.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if row is not None:
                raise SessionExists(
                    f'session "{session_id}" already has a persisted log on disk; '
                    "load/resume it instead of creating"
                )
        except BaseException:
            lock.release()
            raise
        self._open[session_id] = _OpenSession(clean, lock)

    async def append(self, session_id: str, events: Sequence[Event], *, sync: bool = True) -> None:
        entry = self._open.get(session_id)
        if entry is None:
            raise StoreError(f'session "{session_id}" is not open in this backend')
        if entry.broken is not None:
            raise entry.broken.with_traceback(None)
        lines = encode_event_lines(session_id, events, entry.count)
        if not lines:
            return
        rows = [_row(session_id, event, line) for event, line in zip(events, lines, strict=True)]
        db = self._conn()
        # A checkpoint commits without syncing the WAL; the next FULL commit syncs it as well.
        db.execute("PRAGMA synchronous = FULL" if sync else "PRAGMA synchronous = NORMAL")
        db.execute("BEGIN IMMEDIATE")
        try:
            if not entry.materialised:
                header = entry.header
                try:
                    db.execute(
                        "INSERT INTO sessions(id, version, created_at, cwd, parent_session, "
                        "seed_length, header) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (
                            session_id,
                            header["version"],
                            header["createdAt"],
                            header.get("cwd"),
                            header.get("parentSession"),
                            header.get("seedLength"),
                            header_line(header).decode(),
                        ),
                    )
                except sqlite3.IntegrityError:
                    raise SessionExists(
                        f'session "{session_id}" already has a persisted log on disk; '
                        "load/resume it instead of creating"
                    ) from None
            else:
                self._check_unchanged(db, session_id, entry)
            db.executemany(
                "INSERT INTO events(session_id, seq, type, time, data, source_event_seqs, "
                "surface_op, line) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        entry.materialised = True
        entry.count += len(lines)
        entry.last_line = rows[-1][-1]

    @staticmethod
    def _check_unchanged(db: sqlite3.Connection, session_id: str, entry: _OpenSession) -> None:
        """Refuse to append unless the session's rows end where this writer left them.

        Run inside the append's write transaction: the newest row must be seq ``count - 1``
        holding the line this writer wrote (one primary-key lookup). Anything else means
        another program wrote rows; the session stops being written and is left alone.
        """
        last = db.execute(
            "SELECT seq, line FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
            (session_id,),
        ).fetchone()
        expected = None if entry.count == 0 else (entry.count - 1, entry.last_line)
        if (None if last is None else tuple(last)) != expected:
            entry.broken = SessionModified(session_id)
            raise entry.broken

    # -- loading -----------------------------------------------------------------------------

    def _exists(self, session_id: str) -> bool:
        if self._db is None and not os.path.exists(self.path):
            return False
        row = self._conn().execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,))
        return row.fetchone() is not None

    def _parse(self, session_id: str, *, repair: bool) -> _Parsed:
        encode_session_id(session_id)
        if self._db is None and not os.path.exists(self.path):
            raise SessionNotFound(session_id)
        db = self._conn()
        where = self._where(session_id)
        fold_path = self._fold_path(session_id)
        found = load_fold(fold_path)
        hint = None if found is None else len(found[1]) - 1
        chunks: list[bytes] | None = None
        db.text_factory = bytes
        try:
            db.execute("BEGIN")  # one snapshot for every read
            try:
                row = db.execute(
                    "SELECT header FROM sessions WHERE id = ?", (session_id,)
                ).fetchone()
                if row is None:
                    raise SessionNotFound(session_id)
                first = 0
                if hint is not None:
                    chunks = _covered_lines(db, session_id, hint)
                    if chunks is not None:
                        first = hint
                rows = db.execute(
                    "SELECT seq, line FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq",
                    (session_id, first),
                ).fetchall()
            finally:
                db.execute("COMMIT")
        finally:
            db.text_factory = str
        line_of_header: bytes = row[0]
        header = parse_header(line_of_header, where)
        check_header(header, session_id, where)
        header_end = len(line_of_header) + 1
        base: Session | None = None
        parts = [line_of_header + b"\n"]
        if chunks is not None:
            assert found is not None
            fold, starts = found
            bases = _chunk_bases(header_end, chunks)
            key = digest_parts(parts[0], *(piece for chunk in chunks for piece in (chunk, b"\n")))
            if (
                starts[0] == header_end
                and fold.size == bases[-1]
                and all(starts[k * _CHUNK] == at for k, at in enumerate(bases[:-1]))
                and key == fold.digest
            ):
                parts.extend(piece for chunk in chunks for piece in (chunk, b"\n"))
                base = Session.from_fold(
                    session_id,
                    RawEvents(chunks, starts, per=_CHUNK, bases=bases[:-1]),
                    header=header,
                    surface=fold.surface,
                    messages=fold.messages,
                    replace_generation=fold.replace_generation,
                    last_turn=fold.last_turn,
                    open_turn=None,
                )
            else:  # a stale snapshot: read every row, as without one
                return self._parse_rows(
                    db, session_id, line_of_header, header, [], where, repair=repair
                )
        return self._parse_rows(
            db, session_id, line_of_header, header, rows, where, repair=repair,
            base=base, parts=parts, starts=None if base is None else starts,
        )

    def _parse_rows(
        self,
        db: sqlite3.Connection,
        session_id: str,
        line_of_header: bytes,
        header: dict[str, Any],
        rows: list[Any],
        where: str,
        *,
        repair: bool,
        base: Session | None = None,
        parts: list[bytes] | None = None,
        starts: array[int] | None = None,
    ) -> _Parsed:
        """Check ``rows`` (every row, or those after ``base``'s snapshot) as the JSONL store
        checks lines."""
        if parts is None:
            db.text_factory = bytes
            try:
                rows = db.execute(
                    "SELECT seq, line FROM events WHERE session_id = ? ORDER BY seq",
                    (session_id,),
                ).fetchall()
            finally:
                db.text_factory = str
        first = 0 if base is None else len(base)
        lines: list[bytes] = [line for _, line in rows]
        with gc_paused():
            events = scan_event_lines(lines, where, _row_number, first=first)
            for index, event in enumerate(events):
                if rows[index][0] != event.seq:  # the key column disagrees with the line
                    raise corrupt(
                        where,
                        f"row {first + index + 1} is keyed seq {rows[index][0]} "
                        f"but its line holds seq {event.seq}",
                    )
            session, closers = restore_log(
                session_id, header, events, where, repair=repair, position=_row_number, base=base
            )
        torn = sum(len(line) for line in lines[len(events) :])
        kept = lines[: len(events)]
        prefix = parts if parts is not None else [line_of_header + b"\n"]
        return _Parsed(
            header,
            session.events if base is not None else (events + closers if closers else events),
            session,
            closers,
            first + len(rows),
            torn,
            prefix,
            kept,
            first,
            starts,
        )

    def _fold_path(self, session_id: str) -> str:
        return os.path.join(self.fold_dir, encode_session_id(session_id) + ".fold")

    def _refresh_fold(self, session_id: str, parsed: _Parsed) -> None:
        """Write a snapshot of the loaded session (see the JSONL store's ``_refresh_fold``)."""
        session = parsed.session
        count = len(session)
        if count < MIN_EVENTS or count - parsed.folded < 64:
            return
        if session.events[count - 1].type != "turn/end":
            return
        lines = parsed.lines + [encode_event(event) for event in parsed.closers]
        if parsed.starts is not None:
            starts = parsed.starts[:-1] + line_starts(parsed.starts[-1], lines)
        else:
            starts = line_starts(len(parsed.prefix[0]), lines)
        key = digest_parts(*parsed.prefix, *(piece for line in lines for piece in (line, b"\n")))
        surface, messages, generation, last_turn, open_turn = session.fold_state()
        assert open_turn is None and len(starts) == count + 1
        try:
            ensure_private_dir(self.fold_dir)
        except OSError:
            return
        fold = Fold(starts[-1], key, starts.tobytes(), surface, messages, generation, last_turn)
        write_fold(self._fold_path(session_id), fold)

    async def load(self, session_id: str) -> StoredSession:
        if session_id in self._open:
            raise SessionExists(f'session "{session_id}" already exists in this backend')
        encode_session_id(session_id)
        if not self._exists(session_id):  # fail fast, creating nothing
            raise SessionNotFound(session_id)
        db = self._conn()
        lock = acquire(self.lock_dir, session_id)
        try:
            parsed = self._parse(session_id, repair=True)
            kept = len(parsed.events) - len(parsed.closers)
            if parsed.rows > kept or parsed.closers:
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.execute(
                        "DELETE FROM events WHERE session_id = ? AND seq >= ?", (session_id, kept)
                    )
                    db.executemany(
                        "INSERT INTO events(session_id, seq, type, time, data, "
                        "source_event_seqs, surface_op, line) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [_row(session_id, event, encode_event(event)) for event in parsed.closers],
                    )
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
        except BaseException:
            lock.release()
            raise
        self._refresh_fold(session_id, parsed)
        events = parsed.events
        last_line = (
            encode_event(events[-1]).decode() if parsed.closers
            else parsed.lines[-1].decode() if parsed.lines
            else encode_event(events[-1]).decode() if events
            else None
        )
        self._open[session_id] = _OpenSession(
            parsed.header, lock, count=len(events), materialised=True, last_line=last_line
        )
        return StoredSession(
            header=parsed.header,
            events=events,
            repaired=len(parsed.closers),
            truncated_bytes=parsed.torn_bytes,
            session=parsed.session,
        )

    async def read(self, session_id: str) -> StoredSession:
        parsed = self._parse(session_id, repair=False)
        return StoredSession(header=parsed.header, events=parsed.events, session=parsed.session)

    async def export(self, session_id: str) -> bytes:
        parsed = self._parse(session_id, repair=False)
        return b"".join([*parsed.prefix, *(line + b"\n" for line in parsed.lines)])

    async def list(self, *, limit: int | None = None, offset: int = 0) -> list[SessionInfo]:
        if not os.path.exists(self.path) and self._db is None:
            return []
        db = self._conn()
        rows = db.execute(
            "SELECT header FROM sessions AS s "
            "WHERE EXISTS (SELECT 1 FROM events AS e WHERE e.session_id = s.id) "
            "ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
            (-1 if limit is None else limit, offset),
        ).fetchall()
        infos = []
        for (text,) in rows:
            try:
                header = parse_header(text.encode(), self.path)
            except StoreError:
                continue
            infos.append(SessionInfo(header=header))
        return infos

    async def remove(self, session_id: str) -> None:
        if session_id in self._open:
            raise SessionLocked(session_id)
        encode_session_id(session_id)
        if not self._exists(session_id):
            raise SessionNotFound(session_id)
        db = self._conn()
        lock = acquire(self.lock_dir, session_id)
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
                gone = db.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            remove_fold(self._fold_path(session_id))
            if not gone:
                raise SessionNotFound(session_id)
        finally:
            lock.release()

    # -- tracking ----------------------------------------------------------------------------

    def stored_count(self, session_id: str) -> int | None:
        entry = self._open.get(session_id)
        return None if entry is None else entry.count

    async def release(self, session_id: str) -> None:
        entry = self._open.pop(session_id, None)
        if entry is not None:
            entry.lock.release()

    async def close(self) -> None:
        for session_id in list(self._open):
            await self.release(session_id)
        if self._db is not None:
            db, self._db = self._db, None
            db.close()


_CHUNK = 8192
"""Rows fetched per ``group_concat`` when resuming from a snapshot (bounds the extra memory)."""


def _covered_lines(db: sqlite3.Connection, session_id: str, count: int) -> list[bytes] | None:
    """The lines of rows ``0..count-1`` as a few newline-joined texts built inside SQLite (no
    Python object per row), or ``None`` unless their keys are exactly ``0..count-1`` (integers,
    unique by the primary key). Run inside the caller's read transaction."""
    chunks: list[bytes] = []
    for low in range(0, count, _CHUNK):
        high = min(low + _CHUNK, count)
        covered = db.execute(
            # No ORDER BY: the primary-key range scan yields seq order, and a text in any other
            # order would not hash to the snapshot's key (the rows are then read one by one).
            "SELECT count(*), min(seq), max(seq), sum(typeof(seq) != 'integer'), "
            "group_concat(line, char(10)) FROM events "
            "WHERE session_id = ? AND seq >= ? AND seq < ?",
            (session_id, low, high),
        ).fetchone()
        if tuple(covered[:4]) != (high - low, low, high - 1, 0):
            return None
        chunks.append(covered[4])
    return chunks


def _chunk_bases(header_end: int, chunks: list[bytes]) -> list[int]:
    """Where each chunk starts in the log, then where the last one ends (its newline included)."""
    bases = [header_end]
    for chunk in chunks:
        bases.append(bases[-1] + len(chunk) + 1)
    return bases


def _row_number(index: int) -> tuple[str, str]:
    return f"row {index + 1}", ""


def _row(session_id: str, event: Event, line: bytes) -> tuple[Any, ...]:
    return (
        session_id,
        event.seq,
        event.type,
        event.time,
        _json.encode(event.data).decode(),
        None if event.source_event_seqs is None else _json.encode(event.source_event_seqs).decode(),
        None if event.surface_op is None else _json.encode(event.surface_op).decode(),
        line.decode(),
    )


# -- plugin ----------------------------------------------------------------------------------

name = "sqlite-sessions"
inject: list[str] = []


class Config(msgspec.Struct, kw_only=True):
    """``path``: the database file (required; created with mode 0600)."""

    path: str


def apply(ctx: PluginContext, config: Config) -> None:
    """Provide ``session_store`` and mount the write coordinator on this plugin's fiber."""
    store = SqliteStore(config.path)
    ctx.provide("session_store", store)
    mount_coordinator(ctx, store)
