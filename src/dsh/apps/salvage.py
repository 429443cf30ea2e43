"""``dsh sessions import`` and ``dsh sessions salvage``, and how corrupt logs are reported.

- ``import FILE`` (exit 2 for a file that is not a session log) checks the file with the store's own public scan (:func:`scan_event_lines`,
  :func:`restore_log`) and repairs it exactly as loading in place would: a torn last line is
  dropped and an open turn is closed with the crash closers. An empty file, a header-less file
  or a file with no complete event is refused with one line saying so.
- ``salvage ID`` reads a JSONL session file that no longer loads and writes a *new* session (a
  fresh ``<agent>-session-<uuid4>`` id, same cwd, created now so ``--continue`` picks it) holding
  the longest prefix of valid events that ends at a ``turn/end``. The original is never modified.
- :func:`explain` rewrites a corrupt-log error for people: one line number (the file's, as
  ``sed -n Np`` counts) and what to do about it.
"""

from __future__ import annotations

import argparse
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from dsh import _clock
from dsh.errors import UsageError
from dsh.persistence._v0 import parse_header, restore_log, scan_event_lines
from dsh.persistence.base import CorruptSessionLog, SessionStore, StoreError
from dsh.session import Event, Session, decode_event


class Refused(StoreError):
    """A file that cannot become a session (empty, not a log, nothing committed)."""


def _file_position(index: int) -> tuple[str, str]:
    # Event i is on file line i + 2 (the header is line 1): the only number we show.
    return f"file line {index + 2}", ""


def split_log(raw: bytes, where: str) -> tuple[dict[str, Any], list[bytes], int]:
    """The header, the complete event lines, and how many torn bytes follow the last newline."""
    if not raw.strip():
        raise Refused(f"cannot import {where}: the file is empty")
    parts = raw.split(b"\n")
    lines, torn = parts[:-1], len(parts[-1])
    try:
        if not lines:
            raise CorruptSessionLog("no complete first line")
        header = parse_header(lines[0], where)
    except CorruptSessionLog:
        raise Refused(
            f"cannot import {where}: not a dsh session log (its first line is not a "
            '{"type":"session",...} header)'
        ) from None
    return header, lines[1:], torn


def repaired_events(raw: bytes, where: str) -> tuple[dict[str, Any], list[Event], str]:
    """What loading the file in place would keep: its events plus crash closers; and a note."""
    header, lines, torn = split_log(raw, where)
    events = scan_event_lines(lines, where, _file_position)
    _, closers = restore_log(str(header["id"]), header, events, where, repair=True, position=_file_position)
    if not events:
        raise Refused(f"cannot import {where}: the log has a header but no complete event")
    dropped = torn + sum(len(line) + 1 for line in lines[len(events):])
    notes = []
    if dropped:
        notes.append(f"dropped a torn tail of {dropped} bytes")
    if closers:
        notes.append(f"closed the interrupted turn ({len(closers)} closing events)")
    return header, events + closers, f"; repaired: {', '.join(notes)}" if notes else ""


async def write_session(store: SessionStore, header: dict[str, Any], events: list[Event]) -> None:
    session_id = str(header["id"])
    await store.create(header)
    try:
        await store.append(session_id, events)
    finally:
        await store.release(session_id)


OpenStore = Callable[[argparse.Namespace], Awaitable[tuple[SessionStore, Any]]]


async def import_file(args: argparse.Namespace, open_store: OpenStore) -> int:
    """``dsh sessions import``; ``open_store`` is the CLI's (it checks the store flags)."""

    try:
        with open(args.file, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    try:
        header, events, note = repaired_events(raw, args.file)
    except Refused as exc:  # the wrong file was given: a usage error (exit 2)
        raise UsageError(str(exc)) from None
    store, ctx = await open_store(args)
    try:
        await write_session(store, header, events)
    finally:
        await ctx.dispose()
    print(f"imported {header['id']} ({len(events)} events{note})")
    return 0


def committed_prefix(lines: list[bytes], session_id: str, header: dict[str, Any]) -> list[Event]:
    """The longest run of valid events from the start that ends at a ``turn/end`` and folds."""
    valid: list[Event] = []
    for index, line in enumerate(lines):
        try:
            event = decode_event(line)
        except Exception:
            break
        if event.seq != index:
            break
        valid.append(event)
    ends = [i + 1 for i, event in enumerate(valid) if event.type == "turn/end"]
    for end in reversed(ends):
        try:
            Session.restore(session_id, valid[:end], header=header)
        except Exception:
            continue  # an invalid event inside this turn: try the turn before
        return valid[:end]
    return []


async def salvage(store: SessionStore, args: argparse.Namespace) -> int:
    infos = {info.id: info for info in await store.list()}
    info = infos.get(args.id)
    path = info.location if info is not None else None
    if path is None or not path.endswith(".jsonl"):
        raise Refused(
            f'session "{args.id}" is not a JSONL session file in this store; salvage reads JSONL '
            "files (use --root DIR for another folder)"
        )
    with open(path, "rb") as handle:
        raw = handle.read()
    header, lines, _ = split_log(raw, path)
    kept = committed_prefix(lines, args.id, header)
    if not kept:
        raise Refused(f'session "{args.id}" has no complete turn before its first bad line; nothing to salvage')
    agent = args.id.partition("-session-")[0] if "-session-" in args.id else "main"
    new_header: dict[str, Any] = {"version": 0, "id": f"{agent}-session-{uuid.uuid4()}",
                                  "createdAt": _clock.now_ms()}
    if header.get("cwd") is not None:
        new_header["cwd"] = header["cwd"]
    await write_session(store, new_header, kept)
    turns = sum(1 for event in kept if event.type == "turn/end")
    print(f"salvaged {len(kept)} of {len(lines)} events ({turns} turns) from {args.id} into {new_header['id']}")
    print(f"the original is unchanged; continue with: dsh chat --resume {new_header['id']}")
    return 0


_TWO_LINES = re.compile(r"at line \d+(.*?) \((.*), file line (\d+)\)$", re.DOTALL)


def explain(exc: StoreError, session_id: str | None) -> str:
    """The error a person sees: corrupt logs name the file's line and how to recover."""
    text = str(exc)
    if not isinstance(exc, CorruptSessionLog):
        return text
    text = _TWO_LINES.sub(lambda m: f"at file line {m.group(3)}{m.group(1)} ({m.group(2)})", text)
    target = session_id or "ID"
    return (
        f"{text}; the file is left untouched: run `dsh sessions salvage {target}` to copy its valid "
        "turns into a new session"
    )
