"""Session logs in PostgreSQL: the ``postgres-sessions`` plugin and :class:`PostgresStore`.

This module owns the PostgreSQL backend of the session-store contract (``dsh.persistence.base``,
contracts §2.1): its schema and versioned migrations, the one-writer-per-session rule across
hosts (a session-level advisory lock held on a dedicated connection while the session is open),
the single-statement append, crash repair on ``load``, live tailing over LISTEN/NOTIFY, and the
lossless move of a session between stores (:meth:`PostgresStore.export`,
:meth:`PostgresStore.import_session`).

Layout (in the configured schema, ``dsh`` by default):

- ``schema_version(version, applied_at)``: one row per applied migration.
- ``sessions``: one row per persisted session, written by its first append (a session created
  but never flushed leaves nothing). ``header_line`` is the exact JSONL header line; ``header``
  is the same mapping as ``jsonb`` for queries. ``event_count`` (the next seq, which gates
  appends) and ``modified_ms`` (the last event's time) let ``list`` skip the events.
- ``events``: keyed by ``(session_id, seq)``. ``line`` is the exact compact JSON line that
  ``encode_event`` produced and is the record of truth (``jsonb`` reorders keys, so it cannot
  reproduce the bytes); ``type``, ``time`` and ``data`` (``jsonb``) are a queryable projection.

An exported log is therefore byte-identical to the JSONL store's file for the same session.
Lines are checked, scanned and repaired with the JSONL store's v0 helpers, as the SQLite store
does, so all backends accept, refuse and repair the same logs with the same texts; corruption
messages read ``corrupt session log: ... at row <n> (postgresql://<host:port/db> schema "<s>"
(session "<id>"))`` where row ``n`` holds seq ``n - 1``.

Plugin: ``name = "postgres-sessions"``, config ``{dsn?, schema?, poolSize?}``, provides
``session_store`` and mounts the shared write coordinator.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec

from dsh._extras import missing_extra

try:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg.rows import TupleRow
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
except ModuleNotFoundError as exc:  # an optional extra
    error = missing_extra("the PostgreSQL session store (postgres-sessions)", exc)
    if error is None:
        raise
    raise error from None

from dsh import _json
from dsh.persistence._pg_sql import (
    SCHEMA_VERSION,
    Queries,
    channel,
    check_id,
    column,
    describe_target,
    hash64,
    one_line,
    row_number,
)
from dsh.persistence._v0 import (
    check_header,
    corrupt,
    encode_event_lines,
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
from dsh.runtime.config import ConfigError
from dsh.session import Event, Session, decode_event, encode_event

__all__ = [
    "SCHEMA_VERSION",
    "Config",
    "PostgresStore",
    "PostgresUnavailable",
    "apply",
    "inject",
    "name",
]

name = "postgres-sessions"
inject: list[str] = []

Connection = psycopg.AsyncConnection[TupleRow]


class Config(msgspec.Struct, frozen=True, rename="camel"):
    """``postgres-sessions`` config: ``dsn``, ``schema``, ``poolSize``."""

    dsn: str | None = None
    """libpq connection string or URL; falls back to ``$DSH_DATABASE_URL``."""
    schema: Annotated[str, msgspec.Meta(min_length=1)] = "dsh"
    pool_size: Annotated[int, msgspec.Meta(ge=1)] = 4
    """Most pooled connections (reads, listing, removal, import); each open session holds one
    more, dedicated to its writer lock."""


class PostgresUnavailable(StoreError):
    """The server could not be reached; the text names host, port and database, never a password."""


@dataclass
class _Parsed:
    """A persisted session as scanned: the preserved prefix, its session and what load fixes."""

    header: dict[str, Any]
    header_line: str
    events: list[Event]
    session: Session
    closers: list[Event]
    lines: list[bytes]
    rows: int
    """Rows stored; more than ``len(events)`` when a tail past the last turn/end is unusable."""
    torn_bytes: int


# -- the store ---------------------------------------------------------------------------------


@dataclass(eq=False)
class _Open:
    """A session this store writes: its header and the connection holding its writer lock."""

    header: dict[str, Any]
    header_line: str
    conn: Connection
    count: int = 0
    broken: SessionModified | None = None
    # Serialises use of ``conn``: one statement at a time, and release waits for an append.
    busy: asyncio.Lock = field(default_factory=asyncio.Lock)


class PostgresStore(SessionStore):
    """Session logs in PostgreSQL; safe for many processes on many hosts sharing one database.

    Construction does no I/O. The first operation connects, applies migrations and opens the
    pool; :meth:`open` does that eagerly.

    Each open session costs one server connection: the one holding its writer lock. Its appends
    go through that same connection, which fences a writer that lost its lock: if the
    connection dropped (and with it the lock), the append fails instead of racing the next
    holder. Reads, listing, removal and import use the pool.
    """

    kind = "postgres"

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str = "dsh",
        pool_size: int = 4,
        connect_timeout: float = 10.0,
        follow_poll_s: float = 10.0,
    ) -> None:
        dsn = dsn or os.environ.get("DSH_DATABASE_URL")
        if not dsn:
            raise StoreError("no PostgreSQL dsn given and $DSH_DATABASE_URL is not set")
        if not schema:
            raise StoreError("PostgreSQL schema name must not be empty")
        if pool_size < 1:
            raise StoreError(f"PostgreSQL poolSize must be at least 1, got {pool_size}")
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise StoreError(f"invalid PostgreSQL dsn: {one_line(str(exc), None)}") from None
        extra: dict[str, Any] = {}
        if "connect_timeout" not in params:
            extra["connect_timeout"] = max(1, round(connect_timeout))
        if "application_name" not in params:
            extra["application_name"] = "dsh"
        self.schema = schema
        self._conninfo = make_conninfo(dsn, **extra)
        self._target = describe_target({k: str(v) for k, v in params.items()})
        self._password = str(params["password"]) if params.get("password") else None
        self._pool_size = pool_size
        self._connect_timeout = connect_timeout
        self._follow_poll_s = follow_poll_s
        self.channel = channel(schema)
        self._q = Queries.build(schema, self.channel)
        self._migrate_key = hash64("dsh-migrate", schema)
        self._pool: AsyncConnectionPool[Connection] | None = None
        self._ready_lock = asyncio.Lock()
        self._open: dict[str, _Open] = {}
        self._followers: set[Connection] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresStore({self._target!r}, schema={self.schema!r})"

    @property
    def target(self) -> str:
        """``host:port/db`` of the server (never the password), for messages."""
        return self._target

    # -- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, migrate and open the pool now rather than on first use."""
        await self._ready()

    async def _ready(self) -> AsyncConnectionPool[Connection]:
        if self._pool is not None:
            return self._pool
        async with self._ready_lock:
            if self._closed:
                raise StoreError("PostgreSQL session store is closed")
            if self._pool is not None:
                return self._pool
            conn = await self._connect()
            try:
                await self._migrate(conn)
            finally:
                await conn.close()
            pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
                self._conninfo,
                min_size=1,
                max_size=self._pool_size,
                kwargs={"autocommit": True},
                open=False,
                name=f"dsh-sessions-{self.schema}",
                timeout=self._connect_timeout,
            )
            try:
                await pool.open(wait=True, timeout=self._connect_timeout)
            except PoolTimeout as exc:
                await pool.close()
                raise self._unavailable(str(exc)) from None
            self._pool = pool
            return pool

    async def _connect(self) -> Connection:
        """A fresh autocommit connection, with the reference's one-line error when it fails."""
        try:
            return await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        except psycopg.OperationalError as exc:
            raise self._unavailable(str(exc)) from None

    def _unavailable(self, reason: str) -> PostgresUnavailable:
        return PostgresUnavailable(
            f"cannot connect to PostgreSQL at {self._target}: {one_line(reason, self._password)}"
        )

    @contextlib.asynccontextmanager
    async def _pooled(self) -> AsyncIterator[Connection]:
        pool = await self._ready()
        try:
            async with pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise self._unavailable(str(exc)) from None

    async def _migrate(self, conn: Connection) -> None:
        """Bring the schema to :data:`SCHEMA_VERSION`, or refuse a newer one.

        The common case (already current) is two reads and no lock. Otherwise everything runs in
        one transaction under a transaction-scoped advisory lock, so concurrent first uses in
        many processes serialise: the later ones re-read the version inside the lock and find
        nothing left to do, and a failed migration leaves no half-made schema.
        """
        q = self._q
        row = await (await conn.execute(q.version_table)).fetchone()
        if row is not None and row[0] is not None:
            current = await self._current_version(conn)
            if current == SCHEMA_VERSION:
                return
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._migrate_key,))
            await conn.execute(q.create_schema)
            await conn.execute(q.create_version_table)
            current = await self._current_version(conn)
            for version, statements in q.migrations:
                if version <= current:
                    continue
                for statement in statements:
                    await conn.execute(statement)
                await conn.execute(q.record_version, (version,))

    async def _current_version(self, conn: Connection) -> int:
        row = await (await conn.execute(self._q.current_version)).fetchone()
        current = int(row[0]) if row is not None else 0
        if current > SCHEMA_VERSION:
            raise UnsupportedVersion(
                f'PostgreSQL schema "{self.schema}" at {self._target} is at version {current}, '
                f"newer than this dsh supports ({SCHEMA_VERSION}); upgrade dsh"
            )
        return current

    async def close(self) -> None:
        """Release every writer lock, stop followers and close the pool."""
        self._closed = True
        for session_id in list(self._open):
            await self.release(session_id)
        for conn in list(self._followers):
            await conn.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # -- writer locks --------------------------------------------------------------------------

    def _lock_key(self, session_id: str) -> int:
        return hash64(self.schema, session_id)

    async def _lock(self, session_id: str) -> Connection:
        """A dedicated connection holding the session's advisory lock, or :class:`SessionLocked`.

        Not a pooled connection: the lock is session-level, so it lives exactly as long as this
        connection, and the server drops it when the holder's process dies (its socket closes).
        """
        await self._ready()
        conn = await self._connect()
        try:
            row = await (
                await conn.execute("SELECT pg_try_advisory_lock(%s)", (self._lock_key(session_id),))
            ).fetchone()
        except BaseException:
            await conn.close()
            raise
        if row is None or row[0] is not True:
            await conn.close()
            raise SessionLocked(session_id)
        return conn

    async def _unlock(self, conn: Connection, session_id: str) -> None:
        """Drop the writer lock, then its connection.

        Unlocking explicitly matters: a closed connection's locks are freed only when its server
        process notices and exits, a moment later, and a caller may retry at once.
        """
        try:
            if not conn.closed and not conn.broken:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (self._lock_key(session_id),))
        except psycopg.Error:
            pass  # a dead connection has already dropped its lock
        finally:
            await conn.close()

    # -- the contract --------------------------------------------------------------------------

    async def create(self, header: dict[str, Any]) -> None:
        clean = make_header(header)
        session_id: str = check_id(clean["id"])
        if session_id in self._open:
            raise SessionExists(f'session "{session_id}" already exists in this backend')
        conn = await self._lock(session_id)
        try:
            # Checked under the lock: only a lock holder materialises, so the answer holds.
            row = await (await conn.execute(self._q.exists, (session_id,))).fetchone()
            if row is not None:
                raise SessionExists(
                    f'session "{session_id}" already has a persisted log on disk; '
                    "load/resume it instead of creating"
                )
        except BaseException:
            await self._unlock(conn, session_id)
            raise
        self._open[session_id] = _Open(clean, header_line(clean).decode(), conn)

    async def append(self, session_id: str, events: Sequence[Event], *, sync: bool = True) -> None:
        tracked = self._open.get(session_id)
        if tracked is None:
            raise StoreError(f'session "{session_id}" is not open in this backend')
        async with tracked.busy:
            if tracked.broken is not None:
                raise tracked.broken.with_traceback(None)
            lines = encode_event_lines(session_id, events, tracked.count)
            if not lines:
                return
            try:
                await self._write(
                    tracked.conn, session_id, tracked.header, tracked.header_line, events, lines
                )
            except SessionModified as exc:
                tracked.broken = exc  # another program wrote rows: stop writing this session
                raise
            except psycopg.OperationalError as exc:
                if not (tracked.conn.closed or tracked.conn.broken):
                    raise
                # The lock died with its connection; another process may hold it by now, so
                # this writer must not carry on (the events above were not written).
                raise StoreError(
                    f'session "{session_id}" lost the connection holding its writer lock '
                    f"({one_line(str(exc), self._password)}); load it again"
                ) from None
            tracked.count += len(lines)

    async def _write(
        self,
        conn: Connection,
        session_id: str,
        header: Mapping[str, Any],
        line_of_header: str,
        events: Sequence[Event],
        lines: Sequence[bytes],
    ) -> None:
        """Insert one checked, contiguous batch in one statement, or raise :class:`SessionModified`.

        Autocommit makes the statement its own transaction. Inside a caller's transaction it
        runs under a savepoint, so a primary-key failure can still be diagnosed.
        """
        first = events[0].seq
        params: dict[str, Any] = {
            "id": session_id,
            "first": first,
            "count": first + len(events),
            "modified": events[-1].time,
            "seqs": [e.seq for e in events],
            "types": [column(e.type) for e in events],
            "times": [e.time for e in events],
            "lines": [line.decode() for line in lines],
        }
        if first == 0:
            header_json = _json.dumps(dict(header))
            params.update(
                version=header["version"],
                created_at=header["createdAt"],
                cwd=column(header.get("cwd")),
                parent=column(header.get("parentSession")),
                seed_length=header.get("seedLength"),
                header=None if "\\u0000" in header_json else header_json,
                header_line=line_of_header,
            )
            statement = self._q.append_first
        else:
            statement = self._q.append_next
        in_transaction = conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
        try:
            async with conn.transaction() if in_transaction else contextlib.nullcontext():
                written = (await conn.execute(statement, params)).rowcount
        except psycopg.errors.UniqueViolation:
            written = 0
        if written != len(events):
            # The stored next seq is not ours: rows were written by someone other than this
            # writer (the append statement only inserts at the seq the row count says is next).
            raise SessionModified(session_id)

    async def _parse(self, conn: Connection, session_id: str, *, repair: bool) -> _Parsed:
        """Read one snapshot of a persisted session and check it as the JSONL store does.

        A tail past the last ``turn/end`` that does not scan is set aside (``rows`` tells how
        many were stored) rather than refused, exactly as a torn file tail is; committed rows
        are atomic, so only a hand edit produces one.
        """
        check_id(session_id)
        where = self._where(session_id)
        # REPEATABLE READ: the header and the rows come from one snapshot, so a concurrent
        # first append cannot show a header without its rows.
        async with conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            row = await (await conn.execute(self._q.header, (session_id,))).fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            rows = await (await conn.execute(self._q.events, (session_id,))).fetchall()
        line_of_header: str = row[0]
        header = parse_header(line_of_header.encode(), where)
        check_header(header, session_id, where)
        lines = [line.encode() for _, line in rows]
        events = scan_event_lines(lines, where, row_number)
        for index, event in enumerate(events):
            if rows[index][0] != event.seq:  # the key column disagrees with the line
                raise corrupt(
                    where, f"row {index + 1} is keyed seq {rows[index][0]} but its line holds seq {event.seq}"
                )
        session, closers = restore_log(
            session_id, header, events, where, repair=repair, position=row_number
        )
        kept = len(events)
        return _Parsed(
            header,
            line_of_header,
            events,
            session,
            closers,
            lines[:kept],
            len(rows),
            sum(len(line) + 1 for line in lines[kept:]),
        )

    def _where(self, session_id: str) -> str:
        return f'postgresql://{self._target} schema "{self.schema}" (session "{session_id}")'

    async def load(self, session_id: str) -> StoredSession:
        if check_id(session_id) in self._open:
            raise SessionExists(f'session "{session_id}" already exists in this backend')
        conn = await self._lock(session_id)
        try:
            parsed = await self._parse(conn, session_id, repair=True)
            kept = len(parsed.events)
            if parsed.rows > kept or parsed.closers:
                # Set the unusable tail aside and close the interrupted turn in one transaction,
                # durable before anyone sees the session: a resumed loop appends after them.
                async with conn.transaction():
                    if parsed.rows > kept:
                        await conn.execute(self._q.truncate, (session_id, kept))
                        last = parsed.events[-1].time if parsed.events else 0
                        await conn.execute(self._q.set_count, (kept, last, session_id))
                    if parsed.closers:
                        closers = parsed.closers
                        await self._write(
                            conn,
                            session_id,
                            parsed.header,
                            parsed.header_line,
                            closers,
                            [encode_event(event) for event in closers],
                        )
        except BaseException:
            await self._unlock(conn, session_id)
            raise
        events = parsed.events + parsed.closers if parsed.closers else parsed.events
        self._open[session_id] = _Open(parsed.header, parsed.header_line, conn, len(events))
        return StoredSession(
            header=parsed.header,
            events=events,
            repaired=len(parsed.closers),
            truncated_bytes=parsed.torn_bytes,
            session=parsed.session,
        )

    async def read(self, session_id: str) -> StoredSession:
        async with self._pooled() as conn:
            parsed = await self._parse(conn, session_id, repair=False)
        return StoredSession(header=parsed.header, events=parsed.events, session=parsed.session)

    async def list(self, *, limit: int | None = None, offset: int = 0) -> list[SessionInfo]:
        async with self._pooled() as conn:
            cursor = await conn.execute(self._q.listing, (limit, max(0, offset)))
            rows = await cursor.fetchall()
        infos: list[SessionInfo] = []
        for line, modified_ms, count in rows:
            try:
                header = parse_header(line.encode(), self._target)
            except StoreError:
                continue  # as the file stores skip an unreadable log rather than fail the list
            infos.append(
                SessionInfo(header, modified_ms=int(modified_ms), extra={"events": int(count)})
            )
        return infos

    async def _refuse_if_open(self, conn: Connection, session_id: str) -> None:
        """Raise :class:`SessionLocked` while any process holds the session's writer lock.

        A transaction-scoped try-lock conflicts with a holder's session-level lock, so an open
        session is never deleted or overwritten under its writer.
        """
        row = await (
            await conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (self._lock_key(session_id),))
        ).fetchone()
        if row is None or row[0] is not True:
            raise SessionLocked(session_id)

    async def remove(self, session_id: str) -> None:
        if check_id(session_id) in self._open:
            raise SessionLocked(session_id)
        async with self._pooled() as conn, conn.transaction():
            await self._refuse_if_open(conn, session_id)
            cursor = await conn.execute(self._q.delete, (session_id,))
            if cursor.rowcount == 0:
                raise SessionNotFound(session_id)

    def stored_count(self, session_id: str) -> int | None:
        tracked = self._open.get(session_id)
        return None if tracked is None else tracked.count

    async def release(self, session_id: str) -> None:
        tracked = self._open.pop(session_id, None)
        if tracked is None:
            return
        async with tracked.busy:
            await self._unlock(tracked.conn, session_id)

    # -- live tailing --------------------------------------------------------------------------

    def follow(self, session_id: str, after_seq: int) -> AsyncIterator[Event]:
        """Events with ``seq > after_seq`` appended by any process, as they commit.

        The iterator LISTENs first and then reads, so nothing committed in between is missed;
        each notification for the session (and, as a safety net, every ``follow_poll_s``
        seconds) triggers a re-read of the rows after the last seen seq. It runs until the
        consumer closes it or the store closes, and owns one dedicated connection.
        """
        return self._follow(check_id(session_id), after_seq)

    async def _follow(self, session_id: str, after_seq: int) -> AsyncIterator[Event]:
        await self._ready()
        conn = await self._connect()
        self._followers.add(conn)
        try:
            await conn.execute(self._q.listen)
            last = after_seq
            while True:
                cursor = await conn.execute(self._q.events_after, (session_id, last))
                for seq, line in await cursor.fetchall():
                    last = seq
                    yield decode_event(line.encode())
                # Any notification for this session means "re-read"; a batch may carry several,
                # and the re-read covers them all.
                async with contextlib.aclosing(conn.notifies(timeout=self._follow_poll_s)) as gen:
                    async for note in gen:
                        if note.payload == session_id:
                            break
        except psycopg.OperationalError:
            if self._closed:
                return  # close() pulled the connection from under the wait
            raise
        finally:
            self._followers.discard(conn)
            await conn.close()

    # -- moving sessions between stores --------------------------------------------------------

    async def export(self, session_id: str) -> bytes:
        """The session as JSONL bytes, identical to the JSONL store's file: header, then events.

        The stored lines are returned as written (nothing is re-encoded), after the same checks
        as :meth:`read`; like it, this takes no lock.
        """
        async with self._pooled() as conn:
            parsed = await self._parse(conn, session_id, repair=False)
        head = parsed.header_line.encode()
        return b"".join(line + b"\n" for line in [head, *parsed.lines])

    async def import_session(self, header: Mapping[str, Any], events: Sequence[Event]) -> None:
        """Persist a whole session taken from another store (``read`` of any backend).

        Events keep their exact lines (``encode_event`` reproduces what dsh or the reference
        wrote); the header is normalised as ``create`` does, so an export from here matches the
        JSONL file of the same session. The log is checked as an append and a resume would
        check it; the id must not be
        persisted here (:class:`SessionExists`) nor open anywhere (:class:`SessionLocked`). An
        empty log writes nothing, as a never-flushed session leaves nothing.
        """
        clean = make_header(header)
        session_id: str = check_id(clean["id"])
        lines = encode_event_lines(session_id, events, 0)
        restore_log(session_id, clean, list(events), f"import of {session_id!r}", repair=False)
        if not lines:
            return
        if session_id in self._open:
            raise SessionLocked(session_id)
        async with self._pooled() as conn, conn.transaction():
            await self._refuse_if_open(conn, session_id)
            if await (await conn.execute(self._q.exists, (session_id,))).fetchone() is not None:
                raise SessionExists(
                    f'session "{session_id}" already has a persisted log on disk; '
                    "load/resume it instead of creating"
                )
            await self._write(conn, session_id, clean, header_line(clean).decode(), events, lines)


# -- plugin ------------------------------------------------------------------------------------


async def apply(ctx: PluginContext, config: Config) -> None:
    """Provide ``session_store`` backed by PostgreSQL and mount the shared write path."""
    dsn = config.dsn or os.environ.get("DSH_DATABASE_URL")
    if not dsn:
        raise ConfigError("$.dsn: missing required value (or set $DSH_DATABASE_URL)")
    store = PostgresStore(dsn, schema=config.schema, pool_size=config.pool_size)
    ctx.defer(store.close)
    # Connect and migrate now: an unreachable server should fail the app at startup with the
    # clear error, not at the first flush after the user has typed a turn.
    await store.open()
    ctx.provide("session_store", store)
    mount_coordinator(ctx, store)
