"""Live tailing of a PostgreSQL session log over LISTEN/NOTIFY.

Owns :func:`follow` (behind :meth:`dsh.persistence.postgres.PostgresStore.follow`): the events
table's statement trigger notifies the store's channel with the session id on every insert, and
a follower re-reads the rows after the last seq it saw whenever that id arrives.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import psycopg

from dsh.persistence._pg_server import PgServer
from dsh.session import Event, decode_event


async def follow(
    server: PgServer, session_id: str, after_seq: int, poll_s: float
) -> AsyncIterator[Event]:
    """Events with ``seq > after_seq`` appended by any process, as they commit.

    LISTENs first and then reads, so nothing committed in between is missed; each notification
    for the session (and, as a safety net, every ``poll_s`` seconds) triggers a re-read. Runs
    until the consumer closes it or the server closes, on one dedicated connection.
    """
    await server.ready()
    conn = await server.connect()
    server.followers.add(conn)
    try:
        await conn.execute(server.q.listen)
        last = after_seq
        while True:
            cursor = await conn.execute(server.q.events_after, (session_id, last))
            for seq, line in await cursor.fetchall():
                last = seq
                yield decode_event(line.encode())
            # Any notification for this session means "re-read"; a batch may carry several,
            # and the re-read covers them all.
            async with contextlib.aclosing(conn.notifies(timeout=poll_s)) as gen:
                async for note in gen:
                    if note.payload == session_id:
                        break
    except psycopg.OperationalError:
        if server.closed:
            return  # close() pulled the connection from under the wait
        raise
    finally:
        server.followers.discard(conn)
        await conn.close()
