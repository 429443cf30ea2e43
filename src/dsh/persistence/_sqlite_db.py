"""The SQLite store's database: schema, connection, and the row shapes it reads and writes.

Owns :func:`connect` (create with mode 0600, WAL, ``synchronous = FULL``, migrate to
``PRAGMA user_version = 4``), the start-up :func:`probe`, the ``events`` row of an event line (:func:`row`, :data:`INSERT`),
the snapshot-covered read (:func:`covered_lines`) and the write transaction
(:func:`write_transaction`). Used by :mod:`dsh.persistence.sqlite`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from dsh import _json
from dsh.persistence._paths import ensure_private_dir
from dsh.persistence.base import UnsupportedVersion
from dsh.session import Event

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


def connect(path: str) -> sqlite3.Connection:
    """Open (creating with mode 0600 and migrating) the database at ``path``: WAL, FULL sync."""
    ensure_private_dir(os.path.dirname(path))
    if not os.path.exists(path):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            pass
        else:
            os.fchmod(fd, 0o600)  # SQLite gives -wal and -shm the database file's mode
            os.close(fd)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        _migrate(db, path)
    except BaseException:
        db.close()
        raise
    return db


@contextmanager
def write_transaction(db: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back when the body (or the commit) fails."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def probe(db: sqlite3.Connection) -> None:
    """Take the write lock and read both tables' ends, then roll back: what the first append will
    need. A file that is not a database, a truncated one, a read-only one or one whose tables are
    damaged raises ``sqlite3.Error`` here, before a conversation starts, instead of at its first
    flush. Cheap: a few pages, whatever the database's size (no integrity scan)."""
    with contextlib.suppress(sqlite3.Error):
        if db.in_transaction:
            db.execute("ROLLBACK")
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("SELECT count(*) FROM sessions").fetchone()
        db.execute("SELECT seq FROM events ORDER BY session_id DESC, seq DESC LIMIT 1").fetchone()
    finally:
        db.execute("ROLLBACK")


def _migrate(db: sqlite3.Connection, path: str) -> None:
    with write_transaction(db):
        (version,) = db.execute("PRAGMA user_version").fetchone()
        if version == 0:
            tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables:
                raise UnsupportedVersion(
                    f"{path} is not a dsh session database (user_version 0, not empty)"
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif version != SCHEMA_VERSION:
            raise UnsupportedVersion(
                f"unsupported session database schema version {version} in {path} "
                f"(expected {SCHEMA_VERSION})"
            )


INSERT = (
    "INSERT INTO events(session_id, seq, type, time, data, source_event_seqs, surface_op, line) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


CHUNK = 8192
"""Rows fetched per ``group_concat`` when resuming from a snapshot (bounds the extra memory)."""


def covered_lines(db: sqlite3.Connection, session_id: str, count: int) -> list[bytes] | None:
    """The lines of rows ``0..count-1`` as a few newline-joined texts built inside SQLite (no
    Python object per row), or ``None`` unless their keys are exactly ``0..count-1`` (integers,
    unique by the primary key). Run inside the caller's read transaction."""
    chunks: list[bytes] = []
    for low in range(0, count, CHUNK):
        high = min(low + CHUNK, count)
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


def chunk_bases(header_end: int, chunks: list[bytes]) -> list[int]:
    """Where each chunk starts in the log, then where the last one ends (its newline included)."""
    bases = [header_end]
    for chunk in chunks:
        bases.append(bases[-1] + len(chunk) + 1)
    return bases


Row = tuple[str, int, str, int, str, str | None, str | None, str]
"""An ``events`` row as :data:`INSERT` takes it; the last column is the line."""


def row(session_id: str, event: Event, line: bytes) -> Row:
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
