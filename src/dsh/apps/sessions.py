"""``dsh sessions``: read-only views of stored sessions, plus rm, export and import.

Owns the timeline rendering of ``show`` (each time reading, compaction checkpoint and tool call in
order, shadowed events marked), ``requests`` (the exact request of every step rebuilt from the
log alone: the logged header's system prompt, tools and prefix, plus the messages derived from
the log before that ``step/start``); every line goes through :mod:`dsh.apps.escape`. Reads
take no lock and never repair, so they work while another process writes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from dsh import _json, _zones
from dsh.apps.escape import escape_controls
from dsh.persistence.base import SessionStore, StoredSession, StoreError
from dsh.session import DerivedMessages, Event, Session, encode_event


def _time(ms: int, *, date: bool = False) -> str:
    # The same zone and zone data as time-context's readings, not libc's copy.
    moment = datetime.fromtimestamp(ms / 1000, tz=_zones.local_zone())
    return moment.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")


def _text(blocks: Any) -> str:
    parts = []
    for block in blocks or ():
        if not isinstance(block, dict):
            continue
        if block.get("type") in ("text", "reasoning"):
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool-call":
            parts.append(f"{block.get('name')}({block.get('arguments')})")
    return "".join(parts)


def header_line(header: dict[str, Any]) -> bytes:
    """The JSONL header line, keys in the reference order."""
    out: dict[str, Any] = {"type": "session", "version": header.get("version", 0), "id": header["id"],
                           "createdAt": header["createdAt"]}
    for key in ("cwd", "parentSession", "seedLength"):
        if header.get(key) is not None:
            out[key] = header[key]
    return _json.encode(out)


# -- list ------------------------------------------------------------------------------------


def _facts(stored: StoredSession) -> tuple[int, int | None]:
    turns = 0
    for event in stored.events:
        if event.type == "turn/start":
            turns = max(turns, int(event.data.get("turn", 0)))
    last = stored.events[-1].time if stored.events else None
    return turns, last


async def list_sessions(store: SessionStore, args: argparse.Namespace) -> int:
    infos = await store.list(limit=args.limit)
    rows: list[dict[str, Any]] = []
    for info in infos:
        try:
            turns, last = _facts(await store.read(info.id))
        except StoreError:
            turns, last = 0, None
        rows.append({"id": info.id, "createdAt": info.created_at, "cwd": info.header.get("cwd"),
                     "turns": turns, "lastActivity": last, "location": info.location})
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return 0
    if not rows:
        print("no sessions")
        return 0
    table: list[tuple[str, str, str, str, str]] = [("ID", "CREATED", "CWD", "TURNS", "LAST ACTIVITY")]
    for row in rows:
        last = row["lastActivity"]
        table.append((str(row["id"]), _time(int(row["createdAt"]), date=True), str(row["cwd"] or "-"),
                      str(row["turns"]), _time(int(last), date=True) if last else "-"))
    widths = [max(len(escape_controls(r[i])) for r in table) for i in range(5)]
    for r in table:
        print("  ".join(escape_controls(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


# -- show ------------------------------------------------------------------------------------


def timeline(session: Session) -> list[str]:
    """The transcript as the model saw it, event by event, shadowed nodes marked."""
    visible = set(session.surface)
    header = session.header
    lines = [escape_controls(f"session {header['id']} · created {_time(header['createdAt'], date=True)} · "
                             f"cwd {header.get('cwd', '-')} · {len(session.events)} events")]
    for event in session.events:
        line = _timeline_entry(event)
        if line is None:
            continue
        marker = " (shadowed)" if event.surface_op is not None and event.seq not in visible else ""
        # Continuation lines line up under the text column (time + label = 20 columns).
        lines.append(escape_controls(line + marker).replace("\n", "\n" + " " * 20))
    return lines


def _timeline_entry(event: Event) -> str | None:
    data = event.data
    at = _time(event.time)
    kind = event.type
    if kind == "turn/start":
        trigger = (data.get("trigger") or {}).get("kind", "message")
        return f"── turn {data.get('turn')} · {_time(event.time, date=True)} · {trigger} ──"
    if kind == "turn/end":
        reason = dict(data.get("reason") or {})
        detail = reason.pop("kind", "?")
        extra = ", ".join(f"{k}={v}" for k, v in reason.items())
        return f"{at}  ■ turn {data.get('turn')} ended: {detail}{f' ({extra})' if extra else ''}"
    if kind == "user/message":
        source = data.get("source") or {}
        if source.get("plugin") == "compact":
            return f"{at}  ▣ checkpoint  {_text(data.get('content'))}"
        return f"{at}  you        {_text(data.get('content'))}"
    if kind == "context/message":
        source = data.get("source") or {}
        if source.get("plugin") == "time-context":
            return f"{at}  ⏱ reading  {_text(data.get('content')).replace(chr(10), ' · ')}"
        return f"{at}  context    [{source.get('plugin', source.get('kind'))}] {_text(data.get('content'))}"
    if kind == "steering/message":
        return f"{at}  steer      {_text(data.get('content'))}"
    if kind == "assistant/message":
        text = "".join(str(b.get("text", "")) for b in data.get("content") or () if b.get("type") == "text")
        return f"{at}  assistant  {text}" if text else None
    if kind == "tool/call":
        return f"{at}  → tool     {data.get('name')}({data.get('arguments')})"
    if kind == "tool/result":
        flag = "error" if data.get("isError") else "result"
        return f"{at}  ← {flag:<8} {_text(data.get('content'))}"
    if kind == "compact/summary":
        seqs = data.get("shadowedSeqs") or []
        return f"{at}  ▣ compacted {len(seqs)} surface nodes ({data.get('shadowedTokenCount')} tokens) with {data.get('model')}"
    if kind == "compact/end" and data.get("error"):
        return f"{at}  ▣ compaction failed: {data.get('error')}"
    if kind == "prompt/blocked":
        return f"{at}  blocked    {data.get('reason')}"
    return None


def _event_line(event: Event) -> str:
    return escape_controls(f"{event.seq:>6} {_time(event.time)} {event.type:<18} {_json.dumps(event.data)}")


async def show(store: SessionStore, args: argparse.Namespace) -> int:
    stored = await store.read(args.id)
    out = sys.stdout
    if args.json:
        out.write(header_line(stored.header).decode() + "\n")
        for event in stored.events:
            out.write(encode_event(event).decode() + "\n")
    else:
        session = stored.live()
        lines = [_event_line(e) for e in session.events] if args.events else timeline(session)
        out.write("\n".join(lines) + "\n")
    out.flush()
    if args.follow:
        await _follow(store, args, len(stored.events))
    return 0


async def _follow(store: SessionStore, args: argparse.Namespace, seen: int) -> None:
    live = store.follow(args.id, seen - 1)
    render = (lambda e: encode_event(e).decode()) if args.json else (_event_line if args.events else lambda e: escape_controls(_timeline_entry(e) or ""))
    if live is not None:
        async for event in live:
            text = render(event)
            if text:
                print(text, flush=True)
        return
    while True:  # stores without notifications: poll the committed log
        await asyncio.sleep(0.2)
        stored = await store.read(args.id)
        for event in stored.events[seen:]:
            text = render(event)
            if text:
                print(text, flush=True)
        seen = max(seen, len(stored.events))


# -- requests --------------------------------------------------------------------------------


def rebuild_requests(events: Sequence[Event]) -> list[dict[str, Any]]:
    """Every step's request, from the log alone (the RFC's reconstructable requests).

    The header of a step is the one logged right after its ``step/start`` (a first request or a
    change), otherwise the latest one before it. The log is replayed once; the messages of a
    step are the derivation snapshot taken just before its ``step/start``.
    """
    requests = []
    latest: dict[str, Any] | None = None
    pending: tuple[Event, int, int, DerivedMessages] | None = None
    replay = Session("requests")

    def close(
        step_start: Event, turn: int, step: int, history: DerivedMessages, header: dict[str, Any] | None
    ) -> None:
        header = header or {}
        prefix = list(header.get("messagePrefix") or [])
        messages = prefix + history.to_list()
        config = header.get("config") or {}
        requests.append({"turn": turn, "step": step, "seq": step_start.seq, "model": config.get("model"),
                         "config": config, "system": header.get("system"), "tools": header.get("tools") or [],
                         "messages": messages})

    for event in events:
        if event.type == "request/header":
            latest = event.data.get("header")
            if pending is not None:
                close(*pending, latest)
                pending = None
        elif pending is not None and event.type in ("assistant/chunk", "step/end", "turn/end", "step/start"):
            close(*pending, latest)
            pending = None
        if event.type == "step/start":
            turn, step = int(event.data.get("turn", 0)), int(event.data.get("step", 0))
            pending = (event, turn, step, replay.derive_messages())
        replay.extend([event])
    if pending is not None:
        close(*pending, latest)
    return requests


async def requests(store: SessionStore, args: argparse.Namespace) -> int:
    stored = await store.read(args.id)
    rebuilt = rebuild_requests(stored.events)
    if args.step:
        try:
            turn, step = (int(x) for x in args.step.split("."))
        except ValueError:
            from dsh.cli import UsageError

            raise UsageError(f"--step must look like TURN.STEP (e.g. 2.1), got {args.step!r}") from None
        rebuilt = [r for r in rebuilt if r["turn"] == turn and r["step"] == step]
        if not rebuilt:
            raise StoreError(f'session "{args.id}" has no step {turn}.{step}')
    if args.json:
        print(json.dumps(rebuilt, ensure_ascii=False, indent=2))
        return 0
    for request in rebuilt:
        print(escape_controls(f"── turn {request['turn']} step {request['step']} · model {request['model']} · seq {request['seq']} ──"))
        if request["system"]:
            print(escape_controls(f"[system] {request['system']}"))
        if request["tools"]:
            print(escape_controls(f"[tools] {', '.join(str(t.get('name', '?')) for t in request['tools'])}"))
        for message in request["messages"]:
            print(escape_controls(f"[{message['role']}] {_message_text(message)}"))
        print()
    return 0


def _message_text(message: dict[str, Any]) -> str:
    parts = []
    for block in message.get("content") or ():
        if block.get("type") == "tool-result":
            parts.append(f"(tool result {block.get('toolCallId')}) {_text(block.get('content'))}")
        else:
            parts.append(_text([block]))
    return "".join(parts)


# -- rm, export, import ----------------------------------------------------------------------


async def remove(store: SessionStore, args: argparse.Namespace) -> int:
    await store.read(args.id)  # a clear "not found" before asking
    if not args.yes:
        if not sys.stdin.isatty():
            from dsh.cli import UsageError

            raise UsageError(f'refusing to remove session "{args.id}" without --yes (stdin is not a terminal)')
        answer = input(f'remove session "{args.id}"? [y/N] ').strip().lower()
        if answer not in ("y", "yes"):
            print("kept")
            return 0
    await store.remove(args.id)
    print(f"removed {args.id}")
    return 0


async def export(store: SessionStore, args: argparse.Namespace) -> int:
    data = await store.export(args.id)  # the stored bytes, byte-exact (nothing re-encoded)
    if args.output:
        # A session log is private wherever it is copied: a new file is 0600 whatever the umask.
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


async def import_file(args: argparse.Namespace) -> int:
    from dsh.cli import UsageError, open_store
    from dsh.persistence._v0 import parse_log

    try:
        with open(args.file, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    header, events = parse_log(raw, args.file)  # the reference's corruption texts
    store, ctx = await open_store(args)
    try:
        await store.import_session(header, events)
    finally:
        await ctx.dispose()
    print(f"imported {header['id']} ({len(events)} events)")
    return 0
