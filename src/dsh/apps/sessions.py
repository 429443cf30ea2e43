"""``dsh sessions``: read-only views of stored sessions, plus rm and export.

Owns ``list`` (this folder's sessions, or ``--all``, with a title, turns, model and last
activity; a session whose log does not load is marked ``CORRUPT``; columns are measured in
terminal cells so CJK text lines up) and the timeline rendering of ``show`` (each time reading,
compaction checkpoint, reasoning (dim on a terminal), tool call and result in order, shadowed
events marked, the model, token usage and cost (genai-prices) at each turn's end, the session's total cost, and the zone its times are in).
``requests`` lives in :mod:`dsh.apps.requests_view`; import and salvage in
:mod:`dsh.apps.salvage`. Every line goes through :mod:`dsh.apps.escape`. Reads take no lock and
never repair, so they work while another process writes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from datetime import datetime
from typing import Any

from rich.cells import cell_len, get_character_cell_size

from dsh import _json, _zones
from dsh.apps import list_facts, requests_view, sessions_tree, tool_view
from dsh.apps.escape import escape_controls, escape_json
from dsh.apps.hook_view import hook_entry
from dsh.apps.list_facts import text_of as _text
from dsh.apps.requests_view import rebuild_requests
from dsh.errors import UsageError
from dsh.observability.cost import format_usd, usage_cost
from dsh.persistence.base import SessionInfo, SessionStore, StoredSession, StoreError
from dsh.plugins.schedule.delivery import describe as reminder_summary
from dsh.plugins.schedule.delivery import describe_change
from dsh.plugins.time_context.request_zone import source_zone
from dsh.session import Event, Session, encode_event

__all__ = ["export", "list_sessions", "rebuild_requests", "remove", "requests", "show", "timeline"]


def _time(ms: int, *, date: bool = False) -> str:
    # The same zone and zone data as time-context's readings, not libc's copy.
    moment = datetime.fromtimestamp(ms / 1000, tz=_zones.local_zone())
    return moment.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")


def header_line(header: dict[str, Any]) -> bytes:
    """The JSONL header line, keys in the reference order."""
    out: dict[str, Any] = {"type": "session", "version": header.get("version", 0), "id": header["id"],
                           "createdAt": header["createdAt"]}
    for key in ("cwd", "parentSession", "seedLength"):
        if header.get(key) is not None:
            out[key] = header[key]
    return _json.encode(out)


# -- list ------------------------------------------------------------------------------------


def _facts(stored: StoredSession) -> dict[str, Any]:
    """Turns, last activity, title (the first prompt's first line) and the latest model."""
    return list_facts.facts((event.type, event.data, event.time) for event in stored.events)


def _row_facts(store: SessionStore, info: SessionInfo) -> dict[str, Any] | None:
    """A large JSONL log's facts from a bounded read; ``None``: read the log whole."""
    if store.kind != "jsonl" or not info.location:
        return None
    try:
        return list_facts.bounded_facts(info.location)
    except OSError:
        return None


async def list_sessions(store: SessionStore, args: argparse.Namespace) -> int:
    here = os.getcwd()
    infos = [i for i in await store.list() if args.all or i.header.get("cwd") == here]
    if args.limit is not None:
        infos = infos[: args.limit]
    rows: list[dict[str, Any]] = []
    for info in infos:
        row: dict[str, Any] = {"id": info.id, "createdAt": info.created_at, "cwd": info.header.get("cwd")}
        try:
            found = await asyncio.to_thread(_row_facts, store, info)
            row.update(found if found is not None else _facts(await store.read(info.id)))
            row["corrupt"] = None
        except StoreError as exc:
            row.update({"turns": None, "lastActivity": info.modified_ms, "title": None, "model": None,
                        "corrupt": str(exc)})
        row["location"] = info.location
        rows.append(row)
    rows = sessions_tree.nest(rows, infos)
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return 0
    if not rows:
        where = "" if args.all else f" for this folder ({here}); --all lists every folder's"
        print(f"no sessions{where}")
        return 0
    head = ["ID", "TITLE", "TURNS", "MODEL", f"LAST ACTIVITY ({zone_label()})"] + (["CWD"] if args.all else [])
    table = [head]
    for row in rows:
        last = row["lastActivity"]
        turns = "CORRUPT" if row["corrupt"] else str(row["turns"])
        cells = [sessions_tree.shown_id(row), clip(row["title"] or "-", 40), turns, str(row["model"] or "-"),
                 _time(int(last), date=True) if last else "-"]
        table.append(cells + ([str(row["cwd"] or "-")] if args.all else []))
    print_table(table)
    broken = [row["id"] for row in rows if row["corrupt"]]
    if broken:
        print(f"\nCORRUPT: the log has a bad committed line; `dsh sessions show {broken[0]}` names it and "
              f"`dsh sessions salvage {broken[0]}` copies its valid turns into a new session")
    return 0


def cells(text: str) -> int:
    """Terminal columns ``text`` takes (CJK and emoji are two wide)."""
    return cell_len(text)


def clip(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` columns, with an ellipsis when cut."""
    if cells(text) <= width:
        return text
    out, used = "", 0
    for char in text:
        w = get_character_cell_size(char)
        if used + w > width - 1:
            break
        out, used = out + char, used + w
    return out + "…"


def print_table(table: list[list[str]]) -> None:
    table = [[escape_controls(c) for c in row] for row in table]
    widths = [max(cells(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c + " " * (w - cells(c)) for c, w in zip(row, widths, strict=True)).rstrip())


def zone_label() -> str:
    """The zone times are shown in, e.g. ``Asia/Shanghai, UTC+08:00``."""
    zone = _zones.local_zone()
    offset = datetime.now(zone).strftime("%z")
    return f"{_zones.local_zone_key() or 'UTC'}, UTC{offset[:3]}:{offset[3:]}"


# -- show ------------------------------------------------------------------------------------


def timeline(session: Session, *, dim: bool = False) -> list[str]:
    """The transcript as the model saw it, event by event, shadowed nodes marked."""
    visible = set(session.surface)
    header = session.header
    lines = [escape_controls(f"session {header['id']} · created {_time(header['createdAt'], date=True)} · "
                             f"cwd {header.get('cwd', '-')} · {len(session.events)} events · "
                             f"times in {zone_label()}")]
    model: str | None = None
    usage: dict[str, int] = {}
    names: dict[str, str] = {}
    calls: list[tuple[str, dict[str, int], int | None]] = []  # this turn's, priced at its end
    session_calls: list[tuple[str, dict[str, int], int | None]] = []
    for event in session.events:
        if event.type == "request/header":
            config = (event.data.get("header") or {}).get("config") or {}
            model = config.get("model") if isinstance(config.get("model"), str) else model
        elif event.type == "turn/start":
            usage, calls = {}, []
        elif event.type == "assistant/message":
            for key, value in (event.data.get("usage") or {}).items():
                if isinstance(value, int):
                    usage[key] = usage.get(key, 0) + value
            if isinstance(event.data.get("usage"), dict):
                calls.append((model or "", event.data["usage"], event.time))
            thought = _reasoning(event)
            if thought:
                said = escape_controls(f"{_time(event.time)}  thinking   {thought}").replace("\n", "\n" + " " * 20)
                lines.append(f"{DIM}{said}{RESET}" if dim else said)
        entry = _timeline_entry(event, names)
        if entry is None:
            continue
        line = entry
        if event.type == "turn/end":
            line += _turn_facts(model, usage) + _cost_fact(calls)
            session_calls += calls
        marker = " (shadowed)" if event.surface_op is not None and event.seq not in visible else ""
        # Continuation lines line up under the text column (time + label = 20 columns).
        lines.append(escape_controls(line + marker).replace("\n", "\n" + " " * 20))
    total = usage_cost(session_calls)
    if total is not None:
        lines.append(f"total cost {format_usd(total)} over {len(session_calls)} model calls (prices: genai-prices)")
    return lines


def _cost_fact(calls: list[tuple[str, dict[str, int], int | None]]) -> str:
    """`` · cost $0.0012`` when the price table knows every call's model, else nothing."""
    cost = usage_cost(calls)
    return "" if cost is None else f" · cost {format_usd(cost)}"


DIM, RESET = "\x1b[2m", "\x1b[0m"


def _reasoning(event: Event) -> str:
    return "".join(str(b.get("text", "")) for b in event.data.get("content") or () if b.get("type") == "reasoning")


def _turn_facts(model: str | None, usage: dict[str, int]) -> str:
    """`` · model M · tokens in/out N/M · cache hits K`` from the logged headers and usage."""
    parts = [f"model {model}"] if model else []
    if usage:
        parts.append(f"tokens in/out {usage.get('inputTokens', 0)}/{usage.get('outputTokens', 0)}")
        if usage.get("cacheReadTokens"):
            hits = usage["cacheReadTokens"]
            total = usage.get("inputTokens", 0) + hits + usage.get("cacheWriteTokens", 0)
            parts.append(f"cache hits {hits} ({hits * 100 // total}% of input)")
        if usage.get("reasoningTokens"):
            parts.append(f"reasoning {usage['reasoningTokens']}")
    return "".join(f" · {p}" for p in parts)


def _zone_note(source: object) -> str:
    """`` · zone Asia/Tokyo`` for a prompt whose source carries its zone (as time-context reads
    it), else nothing."""
    zone = source_zone(source)
    return f"  · zone {zone}" if zone is not None else ""


def _timeline_entry(event: Event, names: dict[str, str] | None = None) -> str | None:
    """One transcript entry; ``names`` (callId → tool name) lets a result render like its call."""
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
        if source.get("plugin") == "tool-schedule":
            text = _text(data.get("content"))
            return f"{at}  ⏰ reminder {reminder_summary(text) or text}{_zone_note(source)}"
        return f"{at}  you        {_text(data.get('content'))}{_zone_note(source)}"
    if kind == "context/message":
        source = data.get("source") or {}
        if source.get("plugin") == "time-context":
            return f"{at}  ⏱ reading  {_text(data.get('content')).replace(chr(10), ' · ')}"
        return f"{at}  context    [{source.get('plugin', source.get('kind'))}] {_text(data.get('content'))}"
    if kind == "steering/message":
        return f"{at}  steer      {_text(data.get('content'))}{_zone_note(data.get('source'))}"
    if kind == "assistant/message":
        text = "".join(str(b.get("text", "")) for b in data.get("content") or () if b.get("type") == "text")
        return f"{at}  assistant  {text}" if text else None
    if kind == "tool/call":
        if names is not None:
            names[str(data.get("callId"))] = str(data.get("name"))
        view = tool_view.render_call(str(data.get("name")), data.get("arguments"))
        if view is not None:
            return f"{at}  → tool     {view}"
        return f"{at}  → tool     {data.get('name')}({data.get('arguments')})"
    if kind == "tool/result":
        flag = "error" if data.get("isError") else "result"
        name = (names or {}).get(str(data.get("callId")))
        return f"{at}  ← {flag:<8} {tool_view.render_result(name, _text(data.get('content')))}"
    if kind == "approval/asked" and names is not None:
        names[f"approval:{data.get('id')}"] = str(data.get("toolName"))
        return None
    if kind == "approval/decided":
        tool = (names or {}).get(f"approval:{data.get('id')}")
        return f"{at}  approval   {approval_line(data, tool)}"
    if kind == "compact/summary":
        seqs = data.get("shadowedSeqs") or []
        return f"{at}  ▣ compacted {len(seqs)} surface nodes ({data.get('shadowedTokenCount')} tokens) with {data.get('model')}"
    if kind == "compact/end" and data.get("error"):
        return f"{at}  ▣ compaction failed: {data.get('error')}"
    if kind == "prompt/blocked":
        return f"{at}  blocked    {data.get('reason')}"
    if kind == "schedule/change":
        return f"{at}  ⏰ schedule {describe_change(data)}"
    if kind.startswith("hook/"):
        hooked = hook_entry(kind, data, names)
        return f"{at}  {hooked}" if hooked is not None else None
    return None


def approval_line(data: dict[str, Any], tool: str | None) -> str:
    """``bash: allowed-once by rule Bash(npm test:*) (--allow)``; ``… by a person``."""
    outcome = data.get("outcome")
    by = data.get("by")
    if by == "rule":
        how = f" by rule {data.get('rule')} ({data.get('source')})"
    elif by == "person":
        how = " by a person"
        if data.get("scope"):
            how += f", for this session: {data.get('scope')}"
        if data.get("projectRule"):
            how += f", always in this project: {data.get('projectRule')}"
    elif by == "mode":
        how = f" by {data.get('source')}"
    else:
        how = ""
    return f"{tool + ': ' if tool else ''}{outcome}{how}"


def _event_line(event: Event) -> str:
    return escape_controls(f"{event.seq:>6} {_time(event.time)} {event.type:<18} {_json.dumps(event.data)}")


async def show(store: SessionStore, args: argparse.Namespace) -> int:
    stored = await store.read(args.id)
    out = sys.stdout
    if getattr(args, "tree", False):
        out.write("\n".join(await sessions_tree.tree_lines(store, str(stored.header["id"]))) + "\n")
        return 0
    if args.json:
        out.write(header_line(stored.header).decode() + "\n")
        for event in stored.events:
            out.write(encode_event(event).decode() + "\n")
    else:
        session = stored.live()
        dim = out.isatty() and not os.environ.get("NO_COLOR")
        lines = [_event_line(e) for e in session.events] if args.events else timeline(session, dim=dim)
        lines += await sessions_tree.link_lines(store, stored)
        out.write("\n".join(lines) + "\n")
    out.flush()
    if args.follow:
        await _follow(store, args, len(stored.events))
    return 0


async def _follow(store: SessionStore, args: argparse.Namespace, seen: int) -> None:
    live = store.follow(args.id, seen - 1)
    names: dict[str, str] = {}
    render = (lambda e: encode_event(e).decode()) if args.json else (_event_line if args.events else lambda e: escape_controls(_timeline_entry(e, names) or ""))
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


async def requests(store: SessionStore, args: argparse.Namespace) -> int:
    return await requests_view.requests(store, args, sys.stdout)


# -- rm, export, import ----------------------------------------------------------------------


async def remove(store: SessionStore, args: argparse.Namespace) -> int:
    stored = await store.read(args.id)  # a clear "not found" before asking
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(f'refusing to remove session "{args.id}" without --yes (stdin is not a terminal)')
        answer = input(f'remove session "{args.id}"? [y/N] ').strip().lower()
        if answer not in ("y", "yes"):
            print("kept")
            return 0
    await store.remove(args.id)
    from dsh.rewind.ops import delete_snapshots  # git runs only for a session being removed

    snapshots = await asyncio.to_thread(delete_snapshots, stored.header)
    print(f"removed {args.id}" + (f" and its {snapshots} workspace snapshots" if snapshots else ""))
    return 0


async def export(store: SessionStore, args: argparse.Namespace) -> int:
    data = await store.export(args.id)  # the stored bytes, byte-exact (nothing re-encoded)
    if args.output:
        # A session log is private wherever it is copied: a new file is 0600 whatever the umask.
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    elif sys.stdout.isatty():
        # To a terminal the log is shown, not obeyed (JSON escapes: still the same log).
        sys.stdout.write(escape_json(data.decode("utf-8", "replace")))
        sys.stdout.flush()
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0
