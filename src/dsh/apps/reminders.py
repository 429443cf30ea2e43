"""``dsh reminders``: reminders across the whole store, and a worker for closed sessions.

Owns the ``reminders`` command line:

- ``list [--json]``: every active reminder of every stored session (session, id, due time in
  the user's zone, state, kind, prompt), soonest first. Read-only: it takes no lock and works
  while other processes write.
- ``run [--once] [--poll SECONDS]``: the worker. It takes ``dsh chat``'s model and store options
  (``--model``, ``--base-url``, ``--store``, ``--root``, ``--sqlite``, ``--dsn``, ``--config``),
  mounts the same composition as ``dsh chat`` (with ``schedule`` in ``live: false`` mode, since
  the worker delivers itself) and, for each session with a due reminder, resumes it, runs the
  reminder turns with the session's model and tools, flushes, and releases it. It works in each
  session's recorded folder, and only when that folder exists and can be a workspace
  (:mod:`dsh.apps.workspace_choice`); a session that records none works in the worker's own
  folder under the same rule; any other session is reported and left due. With ``--base-url``
  and no ``--model`` each session's own recorded model is served from that endpoint.

A session that cannot be read (a corrupt log) is skipped with one warning naming its file, once
per worker (not once per poll), and shown as ``corrupt`` by ``list``; both exit 0 when
everything else succeeded.

Claiming is the store's writer lock: resuming takes it, so a session open in ``dsh chat`` (whose
own process delivers) or being served by another worker is skipped, and with PostgreSQL several
workers on several hosts share the work. After taking the lock the worker folds the log again,
so a reminder another worker delivered a moment earlier is not delivered twice. The dispatch is
appended after the reminder turn: a worker killed between the two repeats that reminder once on
the next run, and never loses it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dsh import _clock
from dsh.apps import workspace_choice
from dsh.apps.escape import escape_controls
from dsh.apps.store_check import unwritable_reason
from dsh.compose import choose_store
from dsh.errors import UsageError
from dsh.persistence.base import SESSION_STORE, SessionInfo, SessionLocked, SessionStore, StoreError
from dsh.runtime import Context
from dsh.runtime.loader import PluginEntry, load_plugins

# The agent spine, the schedule plugin and time-context are imported where they are used, so
# that every other dsh command, which builds this parser too, does not pay for them.

log = logging.getLogger("dsh.reminders")

DEFAULT_POLL_S = 30.0


@dataclass(frozen=True)
class CliHost:
    """What the ``dsh`` command line lends these commands (passed in, so this module does not
    import the CLI that imports it)."""

    open_store: Callable[[argparse.Namespace], Awaitable[tuple[SessionStore, Context]]]
    default_entries: Callable[[argparse.Namespace], list[PluginEntry]]
    default_model: str  # for a session that never logged a model


class Subcommands(Protocol):
    """The top-level ``add_subparsers()`` action the CLI passes in."""

    def add_parser(self, name: str, *, help: str | None = ...) -> argparse.ArgumentParser: ...


def add_parser(commands: Subcommands, store_options: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``dsh reminders list|run`` to the top-level subcommands."""
    reminders = commands.add_parser("reminders", help="reminders of every stored session; the delivery worker")
    sub = reminders.add_subparsers(dest="action", required=True, parser_class=type(reminders))
    listing = sub.add_parser("list", help="every active reminder, soonest first")
    listing.add_argument("--json", action="store_true", help="one JSON object per reminder")
    run = sub.add_parser("run", help="deliver due reminders of sessions nobody has open")
    run.add_argument("--once", action="store_true", help="one pass over the store, then exit")
    run.add_argument("--poll", type=float, default=DEFAULT_POLL_S, metavar="SECONDS", help="how often to look for new reminders")
    run.add_argument("--model", help="model name (default: each session's own model)")
    run.add_argument("--base-url", help="any OpenAI-compatible endpoint")
    from dsh.apps import permission_flags

    permission_flags.add_arguments(run)
    for sub_parser in (listing, run):
        store_options(sub_parser)
        sub_parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks and debug logs on stderr")


# -- stores ----------------------------------------------------------------------------------


def store_entry(args: argparse.Namespace) -> tuple[PluginEntry, Path | None]:
    """The store plugin entry the options name (as ``dsh sessions`` chooses it)."""
    return choose_store(
        kind=args.store, root=args.root, sqlite=args.sqlite, dsn=args.dsn, config=args.config
    )


async def mount_worker(ctx: Context, args: argparse.Namespace, host: CliHost) -> None:
    """``dsh chat``'s default composition without the app, ``schedule`` in worker mode."""
    from dsh.agent import agent as agents_plugin
    from dsh.agent import loop as loop_plugin
    from dsh.agent import sessions as sessions_plugin
    from dsh.agent import system_prompt as system_prompt_plugin
    from dsh.llm import service as llm_plugin
    from dsh.observability.env import maybe_mount as mount_telemetry
    from dsh.tools import registry as tools_plugin

    await mount_telemetry(ctx)  # traces of every delivery, when OTEL_EXPORTER_OTLP_ENDPOINT is set
    for plugin in (sessions_plugin, llm_plugin, system_prompt_plugin, agents_plugin, tools_plugin):
        await ctx.plugin(plugin)
    chat = argparse.Namespace(**{**vars(args), "resume": None, "store": None})
    entries = [e for e in host.default_entries(chat) if e.name not in ("stdio-app", "schedule")]
    entries.append(PluginEntry("schedule", "schedule", {"live": False}))
    store, base = store_entry(args)
    await load_plugins(ctx, [store, *entries], base_dir=base)
    # Before any reminder's turn (and its tools) runs: a store it cannot write would lose it.
    reason = unwritable_reason(ctx.require(SESSION_STORE))
    if reason is not None:
        raise UsageError(reason)
    await ctx.plugin(loop_plugin)


# -- list ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    session: str
    id: str
    kind: str
    prompt: str
    due: int
    state: str


def skipped(info: SessionInfo, exc: Exception) -> str:
    """The one warning for a session that cannot be read: it names the file."""
    where = f" ({escape_controls(info.location)})" if info.location else ""
    return f"skipped session {escape_controls(info.id)}{where}: {escape_controls(str(exc))}"


async def collect(store: SessionStore, now: int) -> tuple[list[Row], list[str]]:
    """Every active reminder in the store, and one problem line per unreadable session (it is
    skipped; the others are listed)."""
    from dsh.plugins.schedule.fold import ScheduleLogError, fold, seed_length

    rows: list[Row] = []
    problems: list[str] = []
    for info in await store.list():
        try:
            stored = await store.read(info.id)
            state = fold(stored.events, seed_length(stored.header))
        except (StoreError, ScheduleLogError) as exc:
            problems.append(skipped(info, exc))
            rows.append(Row(info.id, "-", "-", "", 0, "corrupt"))
            continue
        for record in state.active.values():
            rows.append(
                Row(info.id, record.id, record.kind, record.prompt, record.scheduled_at,
                    "overdue" if now >= record.scheduled_at else "scheduled")
            )
    rows.sort(key=lambda r: (r.due, r.session, r.id))
    return rows, problems


async def list_reminders(args: argparse.Namespace, host: CliHost) -> int:
    from dsh.plugins.time_context import format_timestamp, resolve_zone

    store, ctx = await host.open_store(args)
    try:
        rows, problems = await collect(store, _clock.now_ms())
    finally:
        await ctx.dispose()
    zone, zone_name = resolve_zone(None)
    if args.json:
        for row in rows:
            if row.state == "corrupt":
                print(json.dumps({"session": row.session, "state": "corrupt"}))
                continue
            print(json.dumps({"session": row.session, "id": row.id, "kind": row.kind, "prompt": row.prompt,
                              "due": format_timestamp(row.due, zone, zone_name), "dueMs": row.due,
                              "state": row.state}, ensure_ascii=False))
    elif rows:
        for row in rows:
            if row.state == "corrupt":
                print(f"{row.session}  corrupt (skipped; see the warning)")
                continue
            print(f"{row.session}  {row.id}  {format_timestamp(row.due, zone, zone_name)}  {row.state}  "
                  f"{row.kind}  {json.dumps(row.prompt, ensure_ascii=False)}")
    else:
        print("no active reminders", file=sys.stderr)
    for problem in problems:
        print(f"dsh: {problem}", file=sys.stderr)
    return 0  # an unreadable session is reported (a "corrupt" row and a warning), not a failure


# -- run -------------------------------------------------------------------------------------


@dataclass
class Pass:
    delivered: int = 0
    failed: int = 0
    skipped: int = 0
    next_due: int | None = None

    def wake_at(self, at: int | None) -> None:
        if at is not None and (self.next_due is None or at < self.next_due):
            self.next_due = at


async def serve_session(ctx: Context, session_id: str, model: str | None, result: Pass, default_model: str) -> None:
    """Resume one session (taking its writer lock), deliver everything due, release it."""
    from dsh.agent.loop import AGENT_LOOP
    from dsh.plugins.schedule.delivery import deliver_once
    from dsh.plugins.schedule.fold import OneShot, Wait
    from dsh.plugins.schedule.plugin import CorruptScheduleLog, check_session

    loop = ctx.require(AGENT_LOOP)
    try:
        agent = await loop.resume("main", session_id, model=model)
    except SessionLocked:
        result.skipped += 1  # open in dsh chat (it delivers) or served by another worker
        return
    try:
        check_session(agent.session)
        if agent.options.model is None:
            agent.options.model = default_model
        while True:
            decision = await deliver_once(ctx, agent)
            if decision is None:
                result.failed += 1
                print(f"dsh: session {session_id}: the reminder turn did not complete; it stays due", file=sys.stderr)
                return
            if isinstance(decision, Wait):
                result.wake_at(decision.until)
                return
            result.delivered += 1
            ids = [decision.record.id] if isinstance(decision, OneShot) else [i.record.id for i in decision.items]
            print(f"delivered {', '.join(ids)} in session {session_id} (turn {agent.session.last_turn})", flush=True)
    except CorruptScheduleLog as exc:
        result.failed += 1
        print(f"dsh: {exc}", file=sys.stderr)
    finally:
        await agent.dispose()


def _workspace_problem(cwd: object) -> str | None:
    """A session is served in its recorded folder, and only when that is an existing folder that
    can be a workspace; one that records none works in the worker's own folder, under the same
    rule."""
    if cwd is None or cwd == "":
        here = os.getcwd()
        why = workspace_choice.refusal(here)
        if why is not None:
            return f"it records no folder, and the worker's folder {escape_controls(here)} cannot be a workspace ({why})"
        return None
    if not isinstance(cwd, str):
        return "its recorded folder is not a path"
    shown = escape_controls(cwd)
    why = workspace_choice.refusal(cwd)
    if why is not None:
        return f"its recorded folder {shown} cannot be a workspace ({why})"
    if not Path(cwd).is_dir():
        return f"its recorded folder {shown} is not a folder"
    return None


async def sweep(ctx: Context, model: str | None, default_model: str, warned: set[str] | None = None) -> Pass:
    """One pass over the store: serve every session with a due reminder. A session that cannot
    be read is skipped, with one warning per worker (``warned``: the sessions already named)."""
    from dsh.plugins.schedule.fold import ScheduleLogError, Wait, decide, fold, seed_length

    store = ctx.require(SESSION_STORE)
    result = Pass()
    for info in await store.list():
        try:
            stored = await store.read(info.id)
            decision = decide(fold(stored.events, seed_length(stored.header)), _clock.now_ms())
        except (StoreError, ScheduleLogError) as exc:
            result.skipped += 1
            if warned is None or info.id not in warned:
                print(f"dsh: {skipped(info, exc)}", file=sys.stderr, flush=True)
                if warned is not None:
                    warned.add(info.id)
            continue
        if isinstance(decision, Wait):
            result.wake_at(decision.until)
            continue
        problem = _workspace_problem(stored.header.get("cwd"))
        if problem is not None:
            result.failed += 1
            print(f"dsh: session {escape_controls(info.id)}: {problem}; its reminder is not delivered", file=sys.stderr)
            continue
        await serve_session(ctx, info.id, model, result, default_model)
    return result


async def run_worker(args: argparse.Namespace, host: CliHost) -> int:
    ctx = Context()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
            installed.append(signum)
    failed = 0
    warned: set[str] = set()
    try:
        await mount_worker(ctx, args, host)
        while not stop.is_set():
            result = await sweep(ctx, args.model, host.default_model, warned)
            failed += result.failed
            if args.once:
                break
            delay = max(0.05, args.poll)
            if result.next_due is not None:
                delay = min(delay, max(0.05, (result.next_due - _clock.now_ms()) / 1000))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await stop.wait()
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
        await ctx.dispose()
    return 1 if failed else 0


async def run_command(args: argparse.Namespace, host: CliHost) -> int:
    if args.action == "list":
        return await list_reminders(args, host)
    return await run_worker(args, host)
