"""One session's rows in PostgreSQL: the single-statement append, the checked read, the repair.

Owns what :mod:`dsh.persistence.postgres` does to a session's rows over a connection it holds:
:func:`write_rows` (one contiguous batch in one statement, gated on the stored row count so a
writer that is not alone raises :class:`~dsh.persistence.base.SessionModified`),
:func:`read_rows` (one snapshot, scanned and checked with the v0 helpers as the file stores
check lines) and :func:`repair` (set an unusable tail aside, close an interrupted turn).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from dsh import _json
from dsh.persistence._pg_server import Connection
from dsh.persistence._pg_sql import Queries, check_id, column
from dsh.persistence._v0 import (
    check_header,
    check_row_keys,
    parse_header,
    restore_log,
    row_number,
    scan_event_lines,
)
from dsh.persistence.base import SessionModified, SessionNotFound
from dsh.session import Event, Session, encode_event
from dsh.session.vocab import JsonObject


@dataclass
class Parsed:
    """A persisted session as scanned: the preserved prefix, its session and what load fixes."""

    header: JsonObject
    header_line: str
    events: list[Event]
    session: Session
    closers: list[Event]
    lines: list[bytes]
    rows: int
    """Rows stored; more than ``len(events)`` when a tail past the last turn/end is unusable."""
    torn_bytes: int


async def write_rows(
    conn: Connection,
    q: Queries,
    session_id: str,
    header: Mapping[str, Any],
    header_line: str,
    events: Sequence[Event],
    lines: Sequence[bytes],
) -> None:
    """Insert one checked, contiguous batch in one statement, or raise :class:`SessionModified`.

    Autocommit makes the statement its own transaction. Inside a caller's transaction it
    runs under a savepoint, so a primary-key failure can still be diagnosed.
    """
    first = events[0].seq
    params: dict[str, object] = {
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
            header_line=header_line,
        )
        statement = q.append_first
    else:
        statement = q.append_next
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


async def read_rows(
    conn: Connection, q: Queries, where: str, session_id: str, *, repair: bool
) -> Parsed:
    """Read one snapshot of a persisted session and check it as the JSONL store does.

    A tail past the last ``turn/end`` that does not scan is set aside (``rows`` tells how
    many were stored) rather than refused, exactly as a torn file tail is; committed rows
    are atomic, so only a hand edit produces one.
    """
    check_id(session_id)
    # REPEATABLE READ: the header and the rows come from one snapshot, so a concurrent
    # first append cannot show a header without its rows.
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        row = await (await conn.execute(q.header, (session_id,))).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        rows = await (await conn.execute(q.events, (session_id,))).fetchall()
    line_of_header: str = row[0]
    header = parse_header(line_of_header.encode(), where)
    check_header(header, session_id, where)
    lines = [line.encode() for _, line in rows]
    events = scan_event_lines(lines, where, row_number)
    check_row_keys(rows, range(len(events)), where)  # the scan keeps seq == index
    session, closers = restore_log(
        session_id, header, events, where, repair=repair, position=row_number
    )
    kept = len(events)
    return Parsed(
        header,
        line_of_header,
        events,
        session,
        closers,
        lines[:kept],
        len(rows),
        sum(len(line) + 1 for line in lines[kept:]),
    )


async def repair(conn: Connection, q: Queries, session_id: str, parsed: Parsed) -> None:
    """Set the unusable tail aside and close the interrupted turn in one transaction, durable
    before anyone sees the session: a resumed loop appends after them."""
    kept = len(parsed.events)
    if parsed.rows <= kept and not parsed.closers:
        return
    async with conn.transaction():
        if parsed.rows > kept:
            await conn.execute(q.truncate, (session_id, kept))
            last = parsed.events[-1].time if parsed.events else 0
            await conn.execute(q.set_count, (kept, last, session_id))
        if parsed.closers:
            closers = parsed.closers
            await write_rows(
                conn,
                q,
                session_id,
                parsed.header,
                parsed.header_line,
                closers,
                [encode_event(event) for event in closers],
            )
