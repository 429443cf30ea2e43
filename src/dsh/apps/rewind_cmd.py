"""``dsh sessions diff``, ``dsh sessions rewind`` and ``dsh sessions gc``.

Owns their output. ``diff ID [--turn N]`` prints the unified diff of what the
agent changed in the workspace (a turn, or the whole session). ``rewind ID --to-turn N
[--files|--conversation|--both] [--force]`` restores the files to before turn N (appending a
``workspace/rewind`` event to the session, under its writer lock), forks the conversation before
turn N into a new session (the original is left as it is), or both (the event then goes to the
new session, which is the one that continues). ``gc [--older-than DAYS]`` prunes snapshots.
The operations themselves are :mod:`dsh.rewind.ops`; the arguments are declared in
:mod:`dsh.cli` (so that building the parser imports none of this).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from dsh.apps import salvage
from dsh.apps.escape import escape_controls
from dsh.errors import UsageError
from dsh.persistence.base import SessionStore
from dsh.rewind import history, ops
from dsh.rewind.history import REWIND
from dsh.session import Session

__all__ = ["ACTIONS"]


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


async def diff(store: SessionStore, args: argparse.Namespace) -> int:
    stored = await store.read(args.id)
    try:
        text = await asyncio.to_thread(ops.diff, stored.header, stored.events, args.turn)
    except (ops.GitError, ops.RewindError) as exc:
        print(f"dsh: {_one_line(exc)}", file=sys.stderr)
        return 1
    if not text:
        where = f"turn {args.turn}" if args.turn is not None else "this session"
        print(f"dsh: no workspace changes recorded for {where}", file=sys.stderr)
        return 0
    if sys.stdout.isatty():  # shown, never obeyed: file contents may hold terminal escapes
        sys.stdout.write(escape_controls(text.decode("utf-8", "replace")))
    else:  # a pipe or a file gets the exact patch (``| git apply``)
        sys.stdout.buffer.write(text)
    sys.stdout.flush()
    _too_big(stored.events, args.turn, "not in the diff")
    return 0


def _too_big(events: Any, turn: int | None, what: str) -> None:
    """One stderr line per file the snapshots left out (over ``maxFileBytes``)."""
    for path, size in sorted(history.too_big(events, turn).items()):
        print(f"dsh: {escape_controls(path)}: {what}: {size / 1_000_000:.1f} MB is over the snapshot size cap, "
              "so it was never kept", file=sys.stderr)


async def rewind(store: SessionStore, args: argparse.Namespace) -> int:
    what = args.what or "files"
    if args.to_turn < 1:
        raise UsageError("--to-turn must be 1 or more")
    if what == "files":
        return await _rewind_files(store, args)
    stored = await store.read(args.id)
    header, events = ops.fork_events(stored.header, stored.events, args.to_turn)
    new_id = str(header["id"])
    if what == "both":
        # Files first: a refusal (a file changed after the agent) leaves no new session behind.
        try:
            data = await _restore(stored.header, stored.events, args)
        except _Refused as exc:
            print(f"dsh: {exc}", file=sys.stderr)
            return 1
        if data is not None:
            live = Session.restore(new_id, events, header=header)
            events = [*events, live.append(REWIND, data)]
    if not events:
        # Before turn 1 the conversation is empty (and an empty log is never stored).
        print(f"the conversation before turn {args.to_turn} is empty: start a new one with dsh chat")
        return 0
    await salvage.write_session(store, header, events)
    await asyncio.to_thread(ops.keep_for, header, new_id, events)
    print(f"new session {new_id}: the conversation before turn {args.to_turn} ({args.id} is unchanged)")
    print(f"continue with: dsh chat --resume {new_id}")
    return 0


async def _restore(header: dict[str, Any], events: Any, args: argparse.Namespace) -> dict[str, Any] | None:
    try:
        data = await asyncio.to_thread(ops.restore_files, header, events, args.to_turn, force=args.force)
    except ops.Conflict as exc:
        raise _Refused(str(exc)) from None
    if data is None:
        print(f"no file changes recorded since turn {args.to_turn}: nothing to restore")
    else:
        restored, total = data["restored"], ops.restored_count(data)
        shown = escape_controls(", ".join(restored[:8])) + (f" and {total - 8} more" if total > 8 else "")
        count = f"{total} file{'s' if total != 1 else ''}"
        print(f"restored {count} to before turn {args.to_turn}{': ' + shown if restored else ''}")
    _too_big(events, args.to_turn, "left as it is")
    return data


class _Refused(Exception):
    pass


async def _rewind_files(store: SessionStore, args: argparse.Namespace) -> int:
    stored = await store.load(args.id)  # the writer lock: no dsh process runs this session now
    try:
        session = stored.live()
        try:
            data = await _restore(stored.header, list(session.events), args)
        except _Refused as exc:
            print(f"dsh: {exc}", file=sys.stderr)
            return 1
        except (ops.GitError, ops.RewindError) as exc:
            print(f"dsh: {_one_line(exc)}", file=sys.stderr)
            return 1
        if data is not None:
            await store.append(args.id, [session.append(REWIND, data)])
    finally:
        await store.release(args.id)
    return 0


async def gc(store: SessionStore, args: argparse.Namespace) -> int:
    removed, emptied = await asyncio.to_thread(ops.gc, None, retention_days=args.older_than)
    plural = "s" if removed != 1 else ""
    note = f" ({emptied} workspace store{'s' if emptied != 1 else ''} emptied)" if emptied else ""
    print(f"removed {removed} snapshot{plural} older than {args.older_than:g} days{note}")
    return 0


ACTIONS = {"diff": diff, "rewind": rewind, "gc": gc}
