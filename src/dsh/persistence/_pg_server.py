"""The PostgreSQL store's connections: the server, the migrated pool and the writer locks.

Owns :class:`PgServer` (used by :mod:`dsh.persistence.postgres`): the DSN and the one-line,
password-free error when the server cannot be reached; bringing the schema to
:data:`~dsh.persistence._pg_sql.SCHEMA_VERSION` once, under an advisory lock, before the pool
opens; pooled connections for reads, listing, removal and import; and the one-writer-per-session
rule across hosts: a session-level advisory lock held on a dedicated connection while the
session is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from dsh.persistence._pg_sql import (
    SCHEMA_VERSION,
    Queries,
    channel,
    describe_target,
    hash64,
    one_line,
)
from dsh.persistence.base import SessionLocked, StoreError, StoreUnavailable, UnsupportedVersion

Connection = psycopg.AsyncConnection[TupleRow]


class PostgresUnavailable(StoreUnavailable):
    """The server could not be reached; the text names host, port and database, never a password."""


class PgServer:
    """One database and schema as a store uses them. Construction does no I/O."""

    def __init__(
        self, dsn: str | None, *, schema: str, pool_size: int, connect_timeout: float
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
        extra: dict[str, str | int] = {}
        if "connect_timeout" not in params:
            extra["connect_timeout"] = max(1, round(connect_timeout))
        if "application_name" not in params:
            extra["application_name"] = "dsh"
        self.schema = schema
        self.target = describe_target({k: str(v) for k, v in params.items()})
        """``host:port/db`` of the server (never the password), for messages."""
        self.channel = channel(schema)
        self.q = Queries.build(schema, self.channel)
        self.closed = False
        """Set by the store's ``close``: no pool opens any more."""
        self.followers: set[Connection] = set()
        """Dedicated connections of live ``follow`` iterators, closed with the server."""
        self._conninfo = make_conninfo(dsn, **extra)
        self._password = str(params["password"]) if params.get("password") else None
        self._pool_size = pool_size
        self._connect_timeout = connect_timeout
        self._migrate_key = hash64("dsh-migrate", schema)
        self._pool: AsyncConnectionPool[Connection] | None = None
        self._ready_lock = asyncio.Lock()

    def one_line(self, reason: str) -> str:
        """A server message as one line, with the password masked."""
        return one_line(reason, self._password)

    # -- connections ---------------------------------------------------------------------------

    async def ready(self) -> AsyncConnectionPool[Connection]:
        """The pool, after connecting and migrating on first use."""
        if self._pool is not None:
            return self._pool
        async with self._ready_lock:
            if self.closed:
                raise StoreError("PostgreSQL session store is closed")
            if self._pool is not None:
                return self._pool
            conn = await self.connect()
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
                raise self.unavailable(str(exc)) from None
            self._pool = pool
            return pool

    async def connect(self) -> Connection:
        """A fresh autocommit connection, with the reference's one-line error when it fails."""
        try:
            return await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        except psycopg.OperationalError as exc:
            raise self.unavailable(str(exc)) from None

    def unavailable(self, reason: str) -> PostgresUnavailable:
        return PostgresUnavailable(
            f"cannot connect to PostgreSQL at {self.target}: {self.one_line(reason)}"
        )

    @contextlib.asynccontextmanager
    async def pooled(self) -> AsyncIterator[Connection]:
        pool = await self.ready()
        try:
            async with pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise self.unavailable(str(exc)) from None

    async def close(self) -> None:
        """Stop followers and close the pool (the store released its writer locks first)."""
        self.closed = True
        for conn in list(self.followers):
            await conn.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # -- migrations ----------------------------------------------------------------------------

    async def _migrate(self, conn: Connection) -> None:
        """Bring the schema to :data:`SCHEMA_VERSION`, or refuse a newer one.

        The common case (already current) is two reads and no lock. Otherwise everything runs in
        one transaction under a transaction-scoped advisory lock, so concurrent first uses in
        many processes serialise: the later ones re-read the version inside the lock and find
        nothing left to do, and a failed migration leaves no half-made schema.
        """
        q = self.q
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
        row = await (await conn.execute(self.q.current_version)).fetchone()
        current = int(row[0]) if row is not None else 0
        if current > SCHEMA_VERSION:
            raise UnsupportedVersion(
                f'PostgreSQL schema "{self.schema}" at {self.target} is at version {current}, '
                f"newer than this dsh supports ({SCHEMA_VERSION}); upgrade dsh"
            )
        return current

    # -- writer locks --------------------------------------------------------------------------

    def lock_key(self, session_id: str) -> int:
        return hash64(self.schema, session_id)

    async def lock(self, session_id: str) -> Connection:
        """A dedicated connection holding the session's advisory lock, or :class:`SessionLocked`.

        Not a pooled connection: the lock is session-level, so it lives exactly as long as this
        connection, and the server drops it when the holder's process dies (its socket closes).
        """
        await self.ready()
        conn = await self.connect()
        try:
            row = await (
                await conn.execute("SELECT pg_try_advisory_lock(%s)", (self.lock_key(session_id),))
            ).fetchone()
        except BaseException:
            await conn.close()
            raise
        if row is None or row[0] is not True:
            await conn.close()
            raise SessionLocked(session_id)
        return conn

    async def unlock(self, conn: Connection, session_id: str) -> None:
        """Drop the writer lock, then its connection.

        Unlocking explicitly matters: a closed connection's locks are freed only when its server
        process notices and exits, a moment later, and a caller may retry at once.
        """
        try:
            if not conn.closed and not conn.broken:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (self.lock_key(session_id),))
        except psycopg.Error:
            pass  # a dead connection has already dropped its lock
        finally:
            await conn.close()

    async def refuse_if_open(self, conn: Connection, session_id: str) -> None:
        """Raise :class:`SessionLocked` while any process holds the session's writer lock.

        A transaction-scoped try-lock conflicts with a holder's session-level lock, so an open
        session is never deleted or overwritten under its writer.
        """
        row = await (
            await conn.execute(
                "SELECT pg_try_advisory_xact_lock(%s)", (self.lock_key(session_id),)
            )
        ).fetchone()
        if row is None or row[0] is not True:
            raise SessionLocked(session_id)
