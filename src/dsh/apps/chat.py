"""``dsh chat``: pick the session and model, load the composition, run the stdio app.

Owns what happens between the parsed flags and the running app: ``--continue`` (the newest
session of this folder) and ``--resume`` (any unique id prefix), refusing a folder that cannot be a workspace and a
session recorded in another folder than the chosen one (:mod:`dsh.apps.workspace_choice`),
continuing with the model the session last used (refused in one line when nothing here serves it), loading the entries of
:mod:`dsh.apps.entries`, and the signals: Ctrl-C cancels a running turn and otherwise ends input
like EOF; SIGTERM does both. ``dsh run`` loads its agent through :func:`load_app` too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from dsh.apps import pipes, session_ids, workspace_choice
from dsh.apps.entries import composition, open_store
from dsh.apps.stdio import STDIO_APP, StdioApp
from dsh.compose import ECHO_MODEL
from dsh.errors import UsageError
from dsh.llm.openai_config import DEFAULT_MODELS
from dsh.llm.providers import provider_of
from dsh.llm.service import LLM
from dsh.persistence.base import StoreError
from dsh.plugins.schedule.plugin import SCHEDULE
from dsh.plugins.subagent.lineage import is_child_header
from dsh.runtime import Context
from dsh.runtime.loader import PluginEntry, load_plugins
from dsh.session import Event

__all__ = ["cmd_chat", "load_app", "prepare_agent"]


async def newest_session_here(args: argparse.Namespace) -> str:
    store, ctx = await open_store(args)
    try:
        here = os.getcwd()
        for info in await store.list():
            if info.header.get("cwd") == here and not is_child_header(info.header):
                return info.id
    finally:
        await ctx.dispose()
    raise StoreError(f"no stored session for this folder ({here})")


async def recorded_session(args: argparse.Namespace, session_id: str) -> tuple[str | None, object]:
    """The model of the session's latest ``request/header`` and its recorded ``cwd``
    (read-only: no lock, no repair). A session that cannot be read gives ``(None, None)``:
    resuming it then reports why."""
    store, ctx = await open_store(args)
    try:
        stored = await store.read(session_id)
    except StoreError:
        return None, None
    finally:
        await ctx.dispose()
    return _last_model(stored.events), stored.header.get("cwd", "")


def _last_model(events: Sequence[Event]) -> str | None:
    for event in reversed(events):
        if event.type == "request/header":
            header = event.data.get("header")
            config = header.get("config") if isinstance(header, dict) else None
            model = config.get("model") if isinstance(config, dict) else None
            return model if isinstance(model, str) and model else None
    return None


def _unserved(args: argparse.Namespace, model: str) -> str:
    how = (
        "add it to the models of an llm plugin in the config"
        if args.config
        else "pass --base-url URL for the endpoint that serves it"
    )
    return (
        f'session "{args.resume}" last used model "{model}", which nothing here serves: '
        f"{how}, or --model NAME to continue with another model"
    )


async def resolve_session(args: argparse.Namespace, text: str) -> str:
    """The full id a typed (possibly prefix) id names in the chosen store."""
    store, ctx = await open_store(args)
    try:
        return await session_ids.resolve(store, text)
    finally:
        await ctx.dispose()


async def prepare_agent(args: argparse.Namespace) -> tuple[list[PluginEntry], Path | None, str | None]:
    """``dsh chat``/``dsh run``: which session to continue and with which model, then the
    entries to load. Returns the entries, their base folder and the recorded model to check."""
    if args.continue_:
        args.resume = await newest_session_here(args)
    elif args.resume:
        args.resume = await resolve_session(args, args.resume)
    recorded: str | None = None
    if not args.resume:
        workspace_choice.check_new(os.getcwd())
    else:
        # The workspace is the folder the person chose, not the one the log names.
        model, cwd = await recorded_session(args, args.resume)
        if cwd is not None:
            workspace_choice.check_resumed(args.resume, cwd, os.getcwd())
    if args.resume and not args.model:
        # Resume continues with the model the session last used; the endpoint comes from the
        # config or the flags.
        recorded = args.model = model
        known = (
            recorded in (ECHO_MODEL, *DEFAULT_MODELS)
            or os.environ.get("DEEPSEEK_BASE_URL")
            or (recorded is not None and provider_of(recorded) is not None)  # provider:model
        )
        if recorded is not None and not args.config and not args.base_url and not known:
            raise UsageError(_unserved(args, recorded))
    entries, base_dir = composition(args)
    return entries, base_dir, recorded


def _discovers(entries: list[PluginEntry]) -> bool:
    """Whether the composition reads project files that need trust (an ``mcp`` discovery entry,
    or the ``hooks`` plugin's settings files)."""
    return any(
        not e.disabled
        and (
            (e.name in ("mcp", "dsh.plugins.mcp.plugin") and (e.config or {}).get("discover") is True)
            or e.name in ("hooks", "dsh.plugins.hooks")
        )
        for e in entries
    )


async def load_app(ctx: Context, args: argparse.Namespace, *, offer_trust: bool = False) -> StdioApp:
    """Load ``dsh chat``'s composition into ``ctx`` and return its running stdio app.

    ``offer_trust`` (terminal-mode ``dsh chat``): first ask about each untrusted project file
    the composition reads, on the terminal, before anything starts."""
    entries, base_dir, recorded = await prepare_agent(args)
    if offer_trust and _discovers(entries):
        from dsh.apps.trust_cmd import offer_at_start

        offer_at_start(Path.cwd())
    await load_plugins(ctx, entries, base_dir=base_dir)
    app = ctx.get(STDIO_APP)
    if app is None:
        raise UsageError(
            "the composition has no running stdio-app entry"
            if args.config
            else "the stdio app did not start (is a dependency missing?)"
        )
    if recorded is not None and not ctx.require(LLM).has_model(recorded):
        raise UsageError(_unserved(args, recorded))
    schedule = ctx.get(SCHEDULE)
    if schedule is not None:
        schedule.check(app.agent)  # a corrupt schedule log refuses the session
    return app


async def cmd_chat(args: argparse.Namespace) -> int:
    ctx = Context()
    try:
        terminal = not args.plain and sys.stdin.isatty() and sys.stdout.isatty()
        app = await load_app(ctx, args, offer_trust=terminal)
        loop = asyncio.get_running_loop()
        stop = _install_signal_handlers(loop, app)
        try:
            await app.run(plain=True if args.plain else None)
        finally:
            stop()
    finally:
        await ctx.dispose()
    if app.output_closed:
        return pipes.EXIT_PIPE
    # Scripts can trust the status: 1 when the last turn of this run ended in error.
    return 1 if app.failed else 0


def _install_signal_handlers(loop: asyncio.AbstractEventLoop, app: StdioApp) -> Callable[[], None]:
    """Ctrl-C cancels a running turn, and otherwise ends input like EOF; SIGTERM does both.

    Either way the app leaves through its normal path, so the final flush always runs.
    """

    def interrupt(terminate: bool) -> None:
        busy = app.agent.status == "running" or app.agent.queued
        if busy:
            app.agent.cancel("interrupted by the user")
        if terminate or not busy:
            app.stop_input()

    installed = []
    for signum, terminate in ((signal.SIGINT, False), (signal.SIGTERM, True)):
        try:
            loop.add_signal_handler(signum, interrupt, terminate)
            installed.append(signum)
        except (NotImplementedError, RuntimeError):
            pass

    def remove() -> None:
        for signum in installed:
            loop.remove_signal_handler(signum)

    return remove
