"""The PostgreSQL store's SQL: schema and migrations, every statement, and the small helpers
around them (advisory-lock keys, the NOTIFY channel, id checks, connection-error text).

Used by :mod:`dsh.persistence.postgres` and its ``_pg_*`` modules; imports psycopg, so it is
loaded only with that store.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from psycopg import sql

from dsh.persistence._paths import encode_session_id
from dsh.persistence.base import InvalidSessionId

# -- schema ------------------------------------------------------------------------------------

SCHEMA_VERSION: Final = 1
"""The newest schema this code knows; a database at a newer version is refused, not guessed at."""

_MIGRATIONS: Final[tuple[tuple[int, tuple[str, ...]], ...]] = (
    (
        1,
        (
            """
            CREATE TABLE {schema}.sessions (
                id text PRIMARY KEY,
                version integer NOT NULL,
                created_at bigint NOT NULL,
                cwd text,
                parent_session text,
                seed_length integer,
                header jsonb,
                header_line text NOT NULL,
                event_count bigint NOT NULL,
                modified_ms bigint NOT NULL
            )
            """,
            "CREATE INDEX sessions_newest ON {schema}.sessions (created_at DESC, id DESC)",
            """
            CREATE TABLE {schema}.events (
                session_id text NOT NULL REFERENCES {schema}.sessions (id) ON DELETE CASCADE,
                seq bigint NOT NULL,
                type text NOT NULL,
                time bigint NOT NULL,
                data jsonb,
                line text NOT NULL,
                PRIMARY KEY (session_id, seq)
            )
            """,
            # A statement trigger, so every insert path (append, repair, import, a hand-written
            # INSERT) wakes followers, once per session per statement; NOTIFY is delivered on
            # commit, so a woken follower always sees the rows. The payload is the session id
            # (ids are capped well under NOTIFY's 8000-byte payload limit).
            """
            CREATE FUNCTION {schema}.notify_events() RETURNS trigger
            LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_notify(TG_ARGV[0], s.session_id)
                FROM (SELECT DISTINCT session_id FROM inserted) AS s;
                RETURN NULL;
            END
            $$
            """,
            """
            CREATE TRIGGER events_notify AFTER INSERT ON {schema}.events
            REFERENCING NEW TABLE AS inserted
            FOR EACH STATEMENT EXECUTE FUNCTION {schema}.notify_events({channel})
            """,
        ),
    ),
)

# Rows whose JSON holds U+0000 cannot be jsonb (PostgreSQL refuses that escape), so their
# jsonb column stays NULL; the text line is the record of truth and keeps them lossless.
# The CASE runs per unnest row, never on a constant, so the planner cannot fold the cast early.
_NUL_ESCAPE: Final = r"E'\\u0000'"

_INSERT_EVENTS: Final = (
    "INSERT INTO {schema}.events (session_id, seq, type, time, data, line) "
    "SELECT head.id, e.seq, e.type, e.time, "
    f"CASE WHEN strpos(e.line, {_NUL_ESCAPE}) = 0 THEN (e.line::jsonb) -> 'data' END, e.line "
    # Binary parameters: in text format psycopg escapes every quote of every JSON line.
    "FROM head, unnest(%(seqs)b::bigint[], %(types)b::text[], %(times)b::bigint[], "
    "%(lines)b::text[]) AS e(seq, type, time, line)"
)

# An append is one statement, hence one transaction and one round trip. The CTE is the gate:
# the first batch inserts the sessions row (or takes over one that load left with no events),
# and a later batch bumps event_count; either only if the stored count still equals this
# batch's first seq, so a racer that got there first makes the gate yield nothing. When the gate
# yields no row, no event is inserted and the caller reports the mismatch. The events primary
# key is the backstop that makes two racers fail rather than interleave.
_APPEND_FIRST: Final = (
    "WITH head AS ("
    "INSERT INTO {schema}.sessions (id, version, created_at, cwd, parent_session, seed_length, "
    "header, header_line, event_count, modified_ms) "
    "VALUES (%(id)s, %(version)s, %(created_at)s, %(cwd)s, %(parent)s, %(seed_length)s, "
    "%(header)s::jsonb, %(header_line)s, %(count)s, %(modified)s) "
    "ON CONFLICT (id) DO UPDATE SET event_count = excluded.event_count, "
    "modified_ms = excluded.modified_ms WHERE sessions.event_count = 0 RETURNING id) "
    + _INSERT_EVENTS
)
_APPEND_NEXT: Final = (
    "WITH head AS ("
    "UPDATE {schema}.sessions SET event_count = %(count)s, modified_ms = %(modified)s "
    "WHERE id = %(id)s AND event_count = %(first)s RETURNING id) " + _INSERT_EVENTS
)


@dataclass(frozen=True)
class Queries:
    """Every statement, composed once per store with the schema identifier quoted."""

    append_first: sql.Composed
    append_next: sql.Composed
    exists: sql.Composed
    header: sql.Composed
    events: sql.Composed
    events_after: sql.Composed
    listing: sql.Composed
    delete: sql.Composed
    truncate: sql.Composed
    set_count: sql.Composed
    listen: sql.Composed
    version_table: sql.Composed
    current_version: sql.Composed
    create_schema: sql.Composed
    create_version_table: sql.Composed
    record_version: sql.Composed
    migrations: tuple[tuple[int, tuple[sql.Composed, ...]], ...]

    @classmethod
    def build(cls, schema: str, channel: str) -> Queries:
        names = {"schema": sql.Identifier(schema), "channel": sql.Literal(channel)}

        def q(text: str) -> sql.Composed:
            # Every text is a constant of this module; only the schema and channel vary, and
            # they go in as a quoted identifier and a literal, never spliced as text.
            return sql.SQL(text).format(**names)

        return cls(
            append_first=q(_APPEND_FIRST),
            append_next=q(_APPEND_NEXT),
            exists=q("SELECT 1 FROM {schema}.sessions WHERE id = %s"),
            header=q("SELECT header_line FROM {schema}.sessions WHERE id = %s"),
            events=q("SELECT seq, line FROM {schema}.events WHERE session_id = %s ORDER BY seq"),
            events_after=q(
                "SELECT seq, line FROM {schema}.events WHERE session_id = %s AND seq > %s "
                "ORDER BY seq"
            ),
            listing=q(
                "SELECT header_line, modified_ms, event_count FROM {schema}.sessions "
                "WHERE event_count > 0 ORDER BY created_at DESC, id DESC LIMIT %s OFFSET %s"
            ),
            delete=q("DELETE FROM {schema}.sessions WHERE id = %s"),
            truncate=q("DELETE FROM {schema}.events WHERE session_id = %s AND seq >= %s"),
            set_count=q(
                "UPDATE {schema}.sessions SET event_count = %s, modified_ms = %s WHERE id = %s"
            ),
            listen=sql.SQL("LISTEN {}").format(sql.Identifier(channel)),
            version_table=sql.SQL("SELECT to_regclass({})").format(
                sql.Literal(_qualified(schema, "schema_version"))
            ),
            current_version=q("SELECT coalesce(max(version), 0) FROM {schema}.schema_version"),
            create_schema=q("CREATE SCHEMA IF NOT EXISTS {schema}"),
            create_version_table=q(
                "CREATE TABLE IF NOT EXISTS {schema}.schema_version ("
                "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            ),
            record_version=q("INSERT INTO {schema}.schema_version (version) VALUES (%s)"),
            migrations=tuple(
                (version, tuple(q(statement) for statement in statements))
                for version, statements in _MIGRATIONS
            ),
        )


def _qualified(schema: str, table: str) -> str:
    """``"schema"."table"`` as text, for ``to_regclass`` (which parses a quoted name)."""
    return '"{}"."{}"'.format(schema.replace('"', '""'), table.replace('"', '""'))


def hash64(*parts: str) -> int:
    """A stable signed 64-bit key (the argument type of ``pg_advisory_lock``)."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def channel(schema: str) -> str:
    # NOTIFY channels are database-wide identifiers of at most 63 bytes; one per schema keeps
    # stores in different schemas apart, hashed only when the readable name would not fit.
    readable = f"{schema}.events"
    if len(readable.encode()) <= 63:
        return readable
    return f"dsh.{hashlib.sha256(schema.encode()).hexdigest()[:16]}.events"


def check_id(session_id: object) -> str:
    """``session_id`` if every store can hold it, else :class:`InvalidSessionId`.

    The file stores' limits apply here too (so a session can always move to them), plus
    PostgreSQL's own: ``text`` holds no NUL and no lone surrogate.
    """
    if type(session_id) is not str:
        raise InvalidSessionId(f"session id must be a string, got {type(session_id).__name__}")
    encode_session_id(session_id)
    if "\x00" in session_id:
        raise InvalidSessionId("session id must not contain NUL characters")
    try:
        session_id.encode()
    except UnicodeEncodeError:
        raise InvalidSessionId("session id is not valid Unicode text (lone surrogate)") from None
    return session_id


def column(text: str | None) -> str | None:
    """A projection column's copy of ``text``; NUL (which ``text`` refuses) becomes U+FFFD.

    Only the queryable projections are lossy this way; the JSON lines keep the exact value.
    """
    if text is None or "\x00" not in text:
        return text
    return text.replace("\x00", "\ufffd")


# -- connection errors -------------------------------------------------------------------------


def describe_target(params: Mapping[str, str]) -> str:
    """``host:port/db`` as libpq would resolve it (explicit values, then ``PG*`` defaults)."""
    host = params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "localhost"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    user = params.get("user") or os.environ.get("PGUSER") or getpass.getuser()
    db = params.get("dbname") or os.environ.get("PGDATABASE") or user
    return f"{host}:{port}/{db}"


def one_line(reason: str, secret: str | None) -> str:
    """A libpq message as one line, with any password masked (known, or DSN-shaped)."""
    if secret:
        reason = reason.replace(secret, "***")
    reason = re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", reason)
    reason = re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", reason, flags=re.I)
    reason = re.sub(r"\s+", " ", reason).strip()
    return reason.removeprefix("connection failed: ") or "connection failed"
