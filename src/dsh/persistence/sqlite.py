"""The SQLite session store and its plugin (docs/stores.md, "SQLite").

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec

from dsh.persistence._fold import (
    digest_parts,
    fold_state,
    line_starts,
    load_fold,
    remove_fold,
    resume,
    snapshot,
    write_fold,
)
from dsh.persistence._lines import LazyLines
from dsh.persistence._local import LocalStore, LocalTracked, Parsed
from dsh.persistence._locks import WriterLock
from dsh.persistence._paths import encode_session_id, ensure_private_dir
from dsh.persistence._sqlite_db import (
    CHUNK,
    INSERT,
    SCHEMA_VERSION,
    chunk_bases,
    connect,
    covered_lines,
    probe,
    write_transaction,
)
from dsh.persistence._sqlite_db import (
    row as event_row,
)
from dsh.persistence._v0 import (
    check_header,
    check_row_keys,
    gc_paused,
    header_line,
    parse_header,
    restore_log,
    row_number,
    scan_event_lines,
    scan_lazily,
)
from dsh.persistence.base import (
    SessionExists,
    SessionInfo,
    SessionModified,
    SessionNotFound,
    StoreError,
)
from dsh.persistence.coordinator import PluginContext, mount_coordinator
from dsh.session import Event, Session, encode_event
from dsh.session.raw import RawEvents
from dsh.session.vocab import JsonObject

__all__ = ["SCHEMA_VERSION", "Config", "SqliteStore", "apply", "inject", "name"]

@dataclass(kw_only=True)
class _OpenSession(LocalTracked):
    materialised: bool = False
    last_line: str | None = None
    """The line of seq ``count - 1`` as this writer wrote or loaded it."""


@dataclass(kw_only=True)
class _Parsed(Parsed):
    rows: int
    prefix: list[bytes]
    """The header line and, when a snapshot was used, the lines it covers (newline-ended)."""
    lines: list[bytes]
    """The preserved lines after ``prefix``."""
    starts: array[int] | None = None
    """The snapshot's line starts, when one was used."""


class SqliteStore(LocalStore[_OpenSession, _Parsed]):
    """Session logs as rows of one SQLite database file (see the module docstring)."""

    kind = "sqlite"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        self.lock_dir = self.path + ".locks"
        self.fold_dir = self.path + ".folds"
        self._db: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = connect(self.path)
        return self._db

    def check(self) -> None:
        """Open the database now and make sure a write can start (``sqlite3.Error`` or
        :class:`UnsupportedVersion` otherwise; see :func:`~dsh.persistence._sqlite_db.probe`)."""
        probe(self._conn())

    def _where(self, session_id: str) -> str:
        return f'{self.path} (session "{session_id}")'

    # -- writing -----------------------------------------------------------------------------

    def _prepare(self) -> None:
        self._conn()

    def _persisted(self, session_id: str) -> bool:
        row = self._conn().execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,))
        return row.fetchone() is not None

    def _require(self, session_id: str) -> None:
        encode_session_id(session_id)
        if not self._exists(session_id):
            raise SessionNotFound(session_id)

    def _track_new(self, header: JsonObject, lock: WriterLock) -> _OpenSession:
        return _OpenSession(header=header, lock=lock)

    def _write(
        self, entry: _OpenSession, events: Sequence[Event], lines: list[bytes], sync: bool
    ) -> None:
        session_id = str(entry.header["id"])
        rows = [event_row(session_id, event, line) for event, line in zip(events, lines, strict=True)]
        db = self._conn()
        # A checkpoint commits without syncing the WAL; the next FULL commit syncs it as well.
        db.execute("PRAGMA synchronous = FULL" if sync else "PRAGMA synchronous = NORMAL")
        with write_transaction(db):
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
                    raise SessionExists.persisted(session_id) from None
            else:
                self._check_unchanged(db, session_id, entry)
            db.executemany(INSERT, rows)
        entry.materialised = True
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
                    chunks = covered_lines(db, session_id, hint)
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
            bases = chunk_bases(header_end, chunks)
            key = digest_parts(parts[0], *(piece for chunk in chunks for piece in (chunk, b"\n")))
            if (
                starts[0] == header_end
                and fold.size == bases[-1]
                and all(starts[k * CHUNK] == at for k, at in enumerate(bases[:-1]))
                and key == fold.digest
            ):
                parts.extend(piece for chunk in chunks for piece in (chunk, b"\n"))
                raw = RawEvents(chunks, starts, per=CHUNK, bases=bases[:-1])
                base = resume(fold, session_id, raw, header)
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
        header: JsonObject,
        rows: list[tuple[int, bytes]],
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
            lazy: LazyLines | None = None
            raw = None
            if base is None:  # log-only events stay as their rows' lines until used
                log = b"\n".join([line_of_header, *lines, b""])
                if log.count(b"\n") == len(lines) + 1:  # no line holds a newline of its own
                    lazy = scan_lazily(log, len(line_of_header) + 1, len(log), where, row_number)
                    raw = RawEvents([log], lazy.starts)
            if lazy is not None:
                events = lazy.items
            else:
                events = scan_event_lines(lines, where, row_number, first=first)
            # The scan keeps only lines whose seq is their index.
            check_row_keys(rows, range(first, first + len(events)), where, first)
            kept = lines[: len(events)]
            session, closers = restore_log(
                session_id, header, events, where, repair=repair, position=row_number,
                base=base, raw=raw, lazy=lazy,
            )
        torn = sum(len(line) for line in lines[len(events) :])
        prefix = parts if parts is not None else [line_of_header + b"\n"]
        return _Parsed(
            header=header,
            events=session.events,
            session=session,
            closers=closers,
            torn_bytes=torn,
            folded=first,
            rows=first + len(rows),
            prefix=prefix,
            lines=kept,
            starts=starts,
        )

    def _fold_path(self, session_id: str) -> str:
        return os.path.join(self.fold_dir, encode_session_id(session_id) + ".fold")

    def _fold_writer(self, session_id: str, parsed: _Parsed) -> Callable[[], None]:
        state = fold_state(parsed.session)

        def write() -> None:
            lines = parsed.lines + [encode_event(event) for event in parsed.closers]
            if parsed.starts is not None:
                starts = parsed.starts[:-1] + line_starts(parsed.starts[-1], lines)
            else:
                starts = line_starts(len(parsed.prefix[0]), lines)
            pieces = (piece for line in lines for piece in (line, b"\n"))
            key = digest_parts(*parsed.prefix, *pieces)
            try:
                ensure_private_dir(self.fold_dir)
            except OSError:
                return
            write_fold(self._fold_path(session_id), snapshot(state, key, starts))

        return write

    def _fix_tail(self, session_id: str, parsed: _Parsed, lock: WriterLock) -> _OpenSession:
        db = self._conn()
        kept = len(parsed.events) - len(parsed.closers)
        if parsed.rows > kept or parsed.closers:
            with write_transaction(db):
                db.execute(
                    "DELETE FROM events WHERE session_id = ? AND seq >= ?", (session_id, kept)
                )
                db.executemany(
                    INSERT,
                    [event_row(session_id, event, encode_event(event)) for event in parsed.closers],
                )
        events = parsed.events
        last_line = (
            encode_event(events[-1]).decode() if parsed.closers
            else parsed.lines[-1].decode() if parsed.lines
            else encode_event(events[-1]).decode() if events
            else None
        )
        return _OpenSession(
            header=parsed.header,
            lock=lock,
            count=len(events),
            materialised=True,
            last_line=last_line,
        )

    def _committed_bytes(self, parsed: _Parsed) -> bytes:
        return b"".join([*parsed.prefix, *(line + b"\n" for line in parsed.lines)])

    def _list(self, limit: int | None, offset: int) -> list[SessionInfo]:
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

    def _delete(self, session_id: str) -> None:
        db = self._conn()
        with write_transaction(db):
            db.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
            gone = db.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount
        remove_fold(self._fold_path(session_id))
        if not gone:
            raise SessionNotFound(session_id)

    def _shutdown(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            db.close()


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
