"""Session logs in PostgreSQL: the ``postgres-sessions`` plugin and :class:`PostgresStore`.

This module owns the PostgreSQL backend of the session-store contract (``dsh.persistence.base``,
docs/stores.md): the sessions it writes (each with the connection holding its writer lock), the
contract's operations, and the lossless move of a session between stores
(:meth:`PostgresStore.export`, :meth:`PostgresStore.import_session`). It builds on
:mod:`~dsh.persistence._pg_server` (connections, migrations, advisory locks),
:mod:`~dsh.persistence._pg_rows` (append, checked read, crash repair),
:mod:`~dsh.persistence._pg_follow` (LISTEN/NOTIFY tailing) and :mod:`~dsh.persistence._pg_sql`
(schema and statements).

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
Lines are checked, scanned and repaired with the v0 helpers, as the file stores do, so all
backends accept, refuse and repair the same logs with the same texts; corruption messages read
``corrupt session log: ... at row <n> (postgresql://<host:port/db> schema "<s>" (session
"<id>"))`` where row ``n`` holds seq ``n - 1``.

Plugin: ``name = "postgres-sessions"``, config ``{dsn?, schema?, poolSize?}``, provides
``session_store`` and mounts the shared write coordinator.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated

import msgspec

from dsh._extras import missing_extra

try:
    import psycopg

    from dsh.persistence._pg_follow import follow
    from dsh.persistence._pg_rows import read_rows, repair, write_rows
    from dsh.persistence._pg_server import Connection, PgServer, PostgresUnavailable
except ModuleNotFoundError as exc:  # an optional extra
    error = missing_extra("the PostgreSQL session store (postgres-sessions)", exc)
    if error is None:
        raise
    raise error from None

from dsh.persistence._pg_sql import SCHEMA_VERSION, check_id
from dsh.persistence._v0 import (
    encode_event_lines,
    header_line,
    make_header,
    parse_header,
    restore_log,
)
from dsh.persistence.base import (
    SessionExists,
    SessionInfo,
    SessionModified,
    SessionNotFound,
    StoredSession,
    StoreError,
    Tracked,
    TrackingStore,
)
from dsh.persistence.coordinator import PluginContext, mount_coordinator
from dsh.runtime.config import ConfigError
from dsh.session import Event
from dsh.session.vocab import JsonObject

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


class Config(msgspec.Struct, frozen=True, rename="camel"):
    """``postgres-sessions`` config: ``dsn``, ``schema``, ``poolSize``."""

    dsn: str | None = None
    """libpq connection string or URL; falls back to ``$DSH_DATABASE_URL``."""
    schema: Annotated[str, msgspec.Meta(min_length=1)] = "dsh"
    pool_size: Annotated[int, msgspec.Meta(ge=1)] = 4
    """Most pooled connections (reads, listing, removal, import); each open session holds one
    more, dedicated to its writer lock."""


# -- the store ---------------------------------------------------------------------------------


@dataclass(eq=False, kw_only=True)
class _Open(Tracked):
    """A session this store writes: its header line and the connection holding its writer lock."""

    header_line: str
    conn: Connection
    # Serialises use of ``conn``: one statement at a time, and release waits for an append.
    busy: asyncio.Lock = field(default_factory=asyncio.Lock)


class PostgresStore(TrackingStore[_Open]):
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
        super().__init__()
        self._server = PgServer(
            dsn, schema=schema, pool_size=pool_size, connect_timeout=connect_timeout
        )
        self.schema = schema
        self.channel = self._server.channel
        self._follow_poll_s = follow_poll_s

    def __repr__(self) -> str:
        return f"PostgresStore({self.target!r}, schema={self.schema!r})"

    @property
    def target(self) -> str:
        """``host:port/db`` of the server (never the password), for messages."""
        return self._server.target

    def _where(self, session_id: str) -> str:
        return f'postgresql://{self.target} schema "{self.schema}" (session "{session_id}")'

    # -- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, migrate and open the pool now rather than on first use."""
        await self._server.ready()

    async def close(self) -> None:
        """Release every writer lock, stop followers and close the pool."""
        self._server.closed = True
        for session_id in list(self._open):
            await self.release(session_id)
        await self._server.close()

    # -- the contract --------------------------------------------------------------------------

    async def create(self, header: JsonObject) -> None:
        clean = make_header(header)
        session_id = self._untracked(check_id(clean["id"]))
        conn = await self._server.lock(session_id)
        try:
            # Checked under the lock: only a lock holder materialises, so the answer holds.
            row = await (await conn.execute(self._server.q.exists, (session_id,))).fetchone()
            if row is not None:
                raise SessionExists.persisted(session_id)
        except BaseException:
            await self._server.unlock(conn, session_id)
            raise
        self._open[session_id] = _Open(
            header=clean, header_line=header_line(clean).decode(), conn=conn
        )

    async def append(self, session_id: str, events: Sequence[Event], *, sync: bool = True) -> None:
        tracked = self._tracked(session_id)
        async with tracked.busy:
            tracked.check_writable()
            lines = encode_event_lines(session_id, events, tracked.count)
            if not lines:
                return
            try:
                await write_rows(
                    tracked.conn,
                    self._server.q,
                    session_id,
                    tracked.header,
                    tracked.header_line,
                    events,
                    lines,
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
                    f"({self._server.one_line(str(exc))}); load it again"
                ) from None
            tracked.count += len(lines)

    async def load(self, session_id: str) -> StoredSession:
        self._untracked(check_id(session_id))
        conn = await self._server.lock(session_id)
        try:
            parsed = await read_rows(
                conn, self._server.q, self._where(session_id), session_id, repair=True
            )
            await repair(conn, self._server.q, session_id, parsed)
        except BaseException:
            await self._server.unlock(conn, session_id)
            raise
        events = parsed.events + parsed.closers if parsed.closers else parsed.events
        self._open[session_id] = _Open(
            header=parsed.header, header_line=parsed.header_line, conn=conn, count=len(events)
        )
        return StoredSession(
            header=parsed.header,
            events=events,
            repaired=len(parsed.closers),
            truncated_bytes=parsed.torn_bytes,
            session=parsed.session,
        )

    async def read(self, session_id: str) -> StoredSession:
        async with self._server.pooled() as conn:
            parsed = await read_rows(
                conn, self._server.q, self._where(session_id), session_id, repair=False
            )
        return StoredSession(header=parsed.header, events=parsed.events, session=parsed.session)

    async def list(self, *, limit: int | None = None, offset: int = 0) -> list[SessionInfo]:
        async with self._server.pooled() as conn:
            cursor = await conn.execute(self._server.q.listing, (limit, max(0, offset)))
            rows = await cursor.fetchall()
        infos: list[SessionInfo] = []
        for line, modified_ms, count in rows:
            try:
                header = parse_header(line.encode(), self.target)
            except StoreError:
                continue  # as the file stores skip an unreadable log rather than fail the list
            infos.append(
                SessionInfo(header, modified_ms=int(modified_ms), extra={"events": int(count)})
            )
        return infos

    async def remove(self, session_id: str) -> None:
        self._refuse_if_tracked(check_id(session_id))
        async with self._server.pooled() as conn, conn.transaction():
            await self._server.refuse_if_open(conn, session_id)
            cursor = await conn.execute(self._server.q.delete, (session_id,))
            if cursor.rowcount == 0:
                raise SessionNotFound(session_id)

    async def release(self, session_id: str) -> None:
        tracked = self._open.pop(session_id, None)
        if tracked is None:
            return
        async with tracked.busy:
            await self._server.unlock(tracked.conn, session_id)

    def follow(self, session_id: str, after_seq: int) -> AsyncIterator[Event]:
        """Events with ``seq > after_seq`` appended by any process, as they commit.

        The iterator LISTENs first and then reads, so nothing committed in between is missed;
        each notification for the session (and, as a safety net, every ``follow_poll_s``
        seconds) triggers a re-read of the rows after the last seen seq. It runs until the
        consumer closes it or the store closes, and owns one dedicated connection.
        """
        return follow(self._server, check_id(session_id), after_seq, self._follow_poll_s)

    # -- moving sessions between stores --------------------------------------------------------

    async def export(self, session_id: str) -> bytes:
        """The session as JSONL bytes, identical to the JSONL store's file: header, then events.

        The stored lines are returned as written (nothing is re-encoded), after the same checks
        as :meth:`read`; like it, this takes no lock.
        """
        async with self._server.pooled() as conn:
            parsed = await read_rows(
                conn, self._server.q, self._where(session_id), session_id, repair=False
            )
        head = parsed.header_line.encode()
        return b"".join(line + b"\n" for line in [head, *parsed.lines])

    async def import_session(
        self, header: Mapping[str, object], events: Sequence[Event]
    ) -> None:
        """Persist a whole session taken from another store (``read`` of any backend).

        Events keep their exact lines (``encode_event`` reproduces what dsh or the reference
        wrote); the header is normalised as ``create`` does, so an export from here matches the
        JSONL file of the same session. The log is checked as an append and a resume would
        check it; the id must not be persisted here (:class:`SessionExists`) nor open anywhere
        (:class:`SessionLocked`). An empty log writes nothing, as a never-flushed session
        leaves nothing.
        """
        clean = make_header(header)
        session_id: str = check_id(clean["id"])
        lines = encode_event_lines(session_id, events, 0)
        restore_log(session_id, clean, list(events), f"import of {session_id!r}", repair=False)
        if not lines:
            return
        self._refuse_if_tracked(session_id)
        q = self._server.q
        async with self._server.pooled() as conn, conn.transaction():
            await self._server.refuse_if_open(conn, session_id)
            if await (await conn.execute(q.exists, (session_id,))).fetchone() is not None:
                raise SessionExists.persisted(session_id)
            header_text = header_line(clean).decode()
            await write_rows(conn, q, session_id, clean, header_text, events, lines)


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
