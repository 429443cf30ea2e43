"""Replay: a stored session (and its child sessions) fed through the same span derivation.

:func:`replay` reads a session from any store (JSONL, SQLite, PostgreSQL, an imported reference
log), feeds its events in order to a :class:`~dsh.observability.spans.SessionTracer`, and
replays each child session (``parentSession`` = this one) at the moment it was created, under
the span open then, as the live plugin does. :func:`trace_command` is ``dsh sessions trace``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dsh.errors import UsageError
from dsh.observability.spans import SessionTracer, SpanData, SpanSink
from dsh.persistence.base import SessionStore

__all__ = ["replay", "trace_command"]

MAX_DEPTH = 8  # child sessions of child sessions…; a cycle of parentSession links stops here


async def _children(store: SessionStore, session_id: str) -> list[tuple[int, str]]:
    infos = await store.list()
    return sorted((i.created_at, i.id) for i in infos if i.header.get("parentSession") == session_id)


async def replay(
    store: SessionStore,
    session_id: str,
    sink: SpanSink,
    *,
    capture_content: bool = False,
    parent: SpanData | None = None,
    depth: int = 0,
) -> int:
    """Feed ``session_id`` (then, in place, its children) to ``sink``; the number of events fed."""
    stored = await store.read(session_id)
    pending = await _children(store, session_id) if depth < MAX_DEPTH else []
    tracer = SessionTracer(session_id, sink, parent=parent, capture_content=capture_content)
    count = 0

    async def children_created_before(limit: int | None) -> int:
        fed = 0
        while pending and (limit is None or pending[0][0] < limit):
            _, kid = pending.pop(0)
            fed += await replay(store, kid, sink, capture_content=capture_content,
                                parent=tracer.innermost(), depth=depth + 1)
        return fed

    for event in stored.events:
        # A child created at time T hangs under what was open when the first later event came.
        count += await children_created_before(event.time)
        tracer.feed(event.type, event.time, event.data)
        count += 1
    count += await children_created_before(None)
    tracer.close()
    return count


def _load_otel() -> Any:
    try:
        from dsh.observability import otel
    except ImportError as exc:
        raise UsageError(f"dsh sessions trace needs OpenTelemetry ({exc.name} is missing): install dsh[otel]") from None
    return otel


async def trace_command(store: SessionStore, args: argparse.Namespace) -> int:
    """``dsh sessions trace ID [--otlp URL] [--json] [--content]``."""
    from dsh.observability import CONTENT_ENV, env_flag

    if not args.otlp and not args.json:
        raise UsageError("dsh sessions trace: give --otlp URL (send to a collector) or --json (print OTLP JSON)")
    otel = _load_otel()
    capture = bool(args.content) or env_flag(CONTENT_ENV)
    status = 0
    if args.otlp:
        remote = otel.pipeline(args.otlp, metrics=False, warn=False)
        await replay(store, args.id, remote.sink(), capture_content=capture)
        flushed = remote.tracer_provider.force_flush(30_000)
        remote.shutdown(1000)
        if remote.failed() or not flushed:
            print(f"dsh: could not send the trace to {otel.signal_url(args.otlp, 'traces')}", file=sys.stderr)
            status = 1
    if args.json:
        memory = otel.memory_pipeline()
        await replay(store, args.id, memory.sink(), capture_content=capture)
        spans = memory.memory.get_finished_spans()
        sys.stdout.write(json.dumps(otel.otlp_json(spans), ensure_ascii=False) + "\n")
        memory.shutdown(0)
    return status
