"""The ``dsh`` command line: ``dsh chat``, ``dsh sessions``, ``dsh mcp`` and ``dsh reminders``.

Owns argument parsing, the built-in default composition (``mock-echo`` or ``openai-llm``,
``echo-tool``, MCP discovery (``mcp`` with ``discover: true``), ``time-context``, ``schedule``,
JSONL sessions, ``stdio-app``), choosing a session store for the ``sessions`` commands, and
turning every error a person can cause into one line on stderr: exit 2 for usage and
configuration errors, 1 for runtime failures, never a traceback unless ``--debug``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import logging
import os
import platform
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import msgspec

from dsh import _zones
from dsh.apps import mcp_cmd, pipes
from dsh.apps import sessions as sessions_view
from dsh.apps.escape import escape_controls
from dsh.apps.store_check import StoreUnwritable
from dsh.compose import APP_NAMES, DEFAULT_ROOT, STORE_NAMES
from dsh.compose import open_store as open_store_by_options
from dsh.errors import UsageError
from dsh.persistence.base import SessionStore, StoreError
from dsh.runtime import ConfigError, Context
from dsh.runtime.loader import LoadError, PluginEntry, load_config_file, load_plugins

log = logging.getLogger("dsh")

ECHO_MODEL = "mock-echo"
# UsageError, APP_NAMES, STORE_NAMES and DEFAULT_ROOT are re-exported for older imports.
__all__ = ["APP_NAMES", "DEFAULT_ROOT", "STORE_NAMES", "UsageError", "build_parser", "main", "open_store"]
WORKSPACE_NAMES = frozenset({"workspace-tools", "dsh.tools.workspace.plugin", "dsh.tools.workspace"})
SANDBOX_MODES = ("read-only", "workspace-write", "danger-full-access")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


# -- parsing ---------------------------------------------------------------------------------


def _store_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("session store")
    group.add_argument("--store", choices=["jsonl", "sqlite", "postgres"], help="store kind (default: jsonl)")
    group.add_argument("--root", help=f"JSONL sessions folder (default: {DEFAULT_ROOT})")
    group.add_argument("--sqlite", metavar="FILE", help="SQLite database file (with --store sqlite)")
    group.add_argument("--dsn", help="PostgreSQL URL (with --store postgres; default $DSH_DATABASE_URL)")
    group.add_argument("--config", metavar="FILE", help="use the store a YAML composition mounts")


def version_text() -> str:
    """``dsh --version``: dsh, Python, and the zone data every zoned time is rendered with."""
    try:
        dsh_version = importlib.metadata.version("dsh")
    except importlib.metadata.PackageNotFoundError:
        dsh_version = "unknown"
    zones = _zones.zone_data()
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"dsh {dsh_version}\nPython {python}\nzone data {zones.describe()}"


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dsh", description="Agents whose history is a durable, time-aware event log.")
    parser.add_argument("--version", action=_VersionAction, help="dsh, Python and zone data versions")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    chat = commands.add_parser("chat", help="talk to an agent over stdin/stdout")
    chat.add_argument("--config", metavar="FILE", help="YAML plugin composition")
    which = chat.add_mutually_exclusive_group()
    which.add_argument("--resume", metavar="SESSION_ID", help="continue a stored session")
    which.add_argument("--continue", dest="continue_", action="store_true", help="continue the newest session of this folder")
    chat.add_argument("--model", help="model name (default: mock-echo, keyless)")
    chat.add_argument("--base-url", help="any OpenAI-compatible endpoint")
    chat.add_argument(
        "--timeout", type=float, metavar="SECONDS",
        help="end the turn with an error when the model sends nothing for this long (default 120)",
    )
    chat.add_argument("--plain", action="store_true", help="plain transcript, no colour or line editing")
    chat.add_argument("--sandbox", choices=list(SANDBOX_MODES), help="bash/file sandbox (default: workspace-write)")
    chat.add_argument("--approval", choices=["ask", "never"], help="approval policy (default: ask)")
    chat.add_argument("--store", choices=["jsonl", "sqlite", "postgres"], help="session store (default: jsonl)")
    chat.add_argument("--root", help=f"JSONL sessions folder (default: {DEFAULT_ROOT})")
    chat.add_argument("--sqlite", metavar="FILE", help="SQLite database file (with --store sqlite)")
    chat.add_argument("--dsn", help="PostgreSQL URL (with --store postgres)")
    chat.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)

    sessions = commands.add_parser("sessions", help="inspect stored sessions")
    sub = sessions.add_subparsers(dest="action", required=True, parser_class=_Parser)
    listing = sub.add_parser("list", help="sessions, newest first")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--limit", type=int)
    show = sub.add_parser("show", help="the transcript as the model saw it")
    show.add_argument("id")
    show.add_argument("--events", action="store_true", help="every raw event")
    show.add_argument("--json", action="store_true", help="the durable log verbatim")
    show.add_argument("--follow", action="store_true", help="keep printing events as they are appended")
    requests = sub.add_parser("requests", help="rebuild each model request from the log alone")
    requests.add_argument("id")
    requests.add_argument("--step", metavar="TURN.STEP")
    requests.add_argument("--json", action="store_true")
    remove = sub.add_parser("rm", help="delete a session")
    remove.add_argument("id")
    remove.add_argument("--yes", action="store_true", help="do not ask")
    export = sub.add_parser("export", help="write a session as JSONL (format v0)")
    export.add_argument("id")
    export.add_argument("-o", "--output", metavar="FILE")
    importing = sub.add_parser("import", help="store a JSONL session log")
    importing.add_argument("file")
    for sub_parser in (listing, show, requests, remove, export, importing):
        _store_options(sub_parser)
        sub_parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
    mcp_cmd.add_parser(commands, _Parser)
    from dsh.apps import reminders

    reminders.add_parser(commands, _store_options)
    return parser


# -- compositions ----------------------------------------------------------------------------


def _is_real_model(args: argparse.Namespace) -> bool:
    return bool(args.base_url) or (args.model is not None and args.model != ECHO_MODEL)


def default_entries(args: argparse.Namespace) -> list[PluginEntry]:
    """The built-in composition of ``dsh chat`` without ``--config``."""
    model = args.model or ECHO_MODEL
    if _is_real_model(args):
        llm_config: dict[str, Any] = {"models": [model]}
        if args.base_url:
            llm_config["baseURL"] = args.base_url
            if not os.environ.get("DEEPSEEK_API_KEY") and not os.environ.get("OPENAI_API_KEY"):
                llm_config["apiKey"] = "not-needed"  # local servers usually take no key
            elif os.environ.get("OPENAI_API_KEY") and not os.environ.get("DEEPSEEK_API_KEY"):
                llm_config["apiKeyEnv"] = "OPENAI_API_KEY"
        llm = PluginEntry(id="llm", name="openai-llm", config=llm_config)
    else:
        # userText: the mock answers what was typed, not the time reading (see dsh.llm.echo).
        llm = PluginEntry(id="llm", name="echo-llm", config={"answer": "userText"})
    app: dict[str, Any] = {"model": model, "persistenceRoot": args.root or DEFAULT_ROOT}
    app.update(_store_config(args))
    if args.resume:
        app["resumeSessionId"] = args.resume
    return [
        llm,
        PluginEntry(id="echo-tool", name="echo-tool"),
        # MCP servers of the project's .mcp.json and the user's mcp.json (none: nothing mounted).
        PluginEntry(id="mcp", name="mcp", config={"discover": True}),
        PluginEntry(id="workspace-tools", name="workspace-tools", config=_workspace_config(args, {})),
        PluginEntry(id="agent-instructions", name="agent-instructions"),
        PluginEntry(id="time-context", name="time-context"),
        PluginEntry(id="schedule", name="schedule"),
        *_store_entries(args),
        PluginEntry(id="app", name="stdio-app", config=app),
    ]


def _workspace_config(args: argparse.Namespace, config: dict[str, Any]) -> dict[str, Any]:
    """``--sandbox``/``--approval`` over the entry's own config (the YAML keys of the same name)."""
    out = dict(config)
    if getattr(args, "sandbox", None):
        out["sandbox"] = args.sandbox
    if getattr(args, "approval", None):
        out["approval"] = args.approval
    return out


def _store_config(args: argparse.Namespace) -> dict[str, Any]:
    if args.store == "sqlite":
        return {"store": "sqlite", **({"sqlitePath": args.sqlite} if args.sqlite else {})}
    return {}


def _store_entries(args: argparse.Namespace) -> list[PluginEntry]:
    if args.store == "postgres":
        config = {"dsn": args.dsn} if args.dsn else {}
        return [PluginEntry(id="store", name="postgres-sessions", config=config)]
    return []


OPENAI_NAMES = frozenset({"openai-llm", "dsh.llm.openai_compat"})


def _apply_timeout(args: argparse.Namespace, entries: list[PluginEntry]) -> list[PluginEntry]:
    """``--timeout`` goes to every openai-llm entry; a composition without one refuses it."""
    timeout = getattr(args, "timeout", None)
    if timeout is None:
        return entries
    if not 0 < timeout < float("inf"):  # also refuses nan
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout:g}")
    patched, found = [], False
    for e in entries:
        if e.name in OPENAI_NAMES and not e.disabled:
            found = True
            e = PluginEntry(e.id, e.name, {**(e.config or {}), "timeoutSeconds": timeout}, e.disabled, e.line)
        patched.append(e)
    if not found:
        raise UsageError("--timeout applies to openai-llm models, and this composition has none")
    return patched


def check_store_flags(kind: str | None, args: argparse.Namespace, *, mounted: str | None = None) -> None:
    """Store flags the chosen store would ignore are refused, never dropped silently.

    ``kind`` is the store in effect (``None``: the default JSONL store); ``mounted`` names the
    store plugin a composition mounts itself, which no flag can change.
    """
    given = [flag for flag, value in (("--root", args.root), ("--sqlite", args.sqlite), ("--dsn", args.dsn)) if value]
    if mounted is not None and (given or args.store):
        flag = given[0] if given else "--store"
        raise UsageError(f"{flag} cannot change the store: the composition mounts its own ({mounted}); edit its config")
    if args.sqlite and kind != "sqlite":
        raise UsageError("--sqlite needs --store sqlite")
    if args.dsn and kind != "postgres":
        raise UsageError("--dsn needs --store postgres")
    if args.root and kind == "postgres":
        raise UsageError("--root names a JSONL or SQLite folder; it has no effect with --store postgres")


def composition(args: argparse.Namespace) -> tuple[list[PluginEntry], Path | None]:
    """The entries ``dsh chat`` loads, with command-line overrides applied."""
    if not args.config:
        check_store_flags(args.store, args)
        return _apply_timeout(args, default_entries(args)), None
    path = Path(args.config)
    if not path.is_file():
        raise UsageError(f"config file {args.config} not found")
    entries = _apply_timeout(args, load_config_file(path))
    if args.base_url:
        # The composition's model plugin has its own endpoint; quietly keeping it would be a lie.
        raise UsageError("--base-url only applies without --config; set baseURL in the config's openai-llm entry")
    mounted = [e for e in entries if e.name in STORE_NAMES and not e.disabled]
    check_store_flags(args.store, args, mounted=mounted[-1].id if mounted else None)
    apps = [e for e in entries if e.name in APP_NAMES and not e.disabled]
    if not apps:
        # Load anyway: a broken entry deserves its own error before "no app" is reported.
        return entries, path.resolve().parent
    app = apps[0]
    config = dict(app.config or {})
    if args.model:
        config["model"] = args.model
    if args.root:
        config["persistenceRoot"] = args.root
    config.update(_store_config(args))
    if args.resume:
        config["resumeSessionId"] = args.resume
    patched = PluginEntry(app.id, app.name, config, app.disabled, app.line)
    entries = [
        PluginEntry(e.id, e.name, _workspace_config(args, dict(e.config or {})), e.disabled, e.line)
        if e.name in WORKSPACE_NAMES
        else e
        for e in entries
    ]
    # Stores load before the app, so it uses the composition's store instead of its default.
    ordered = [e for e in entries if e.name in STORE_NAMES] + _store_entries(args)
    ordered += [patched if e is app else e for e in entries if e.name not in STORE_NAMES]
    return ordered, path.resolve().parent


# -- stores ----------------------------------------------------------------------------------


async def open_store(args: argparse.Namespace) -> tuple[SessionStore, Context]:
    """The session store the ``sessions`` commands (and ``--continue``) read."""
    opened = await open_store_by_options(
        kind=args.store,
        root=args.root,
        sqlite=args.sqlite,
        dsn=getattr(args, "dsn", None),
        config=getattr(args, "config", None),
        check=lambda kind, mounted: check_store_flags(kind, args, mounted=mounted),
    )
    return opened.store, opened.ctx


async def newest_session_here(args: argparse.Namespace) -> str:
    store, ctx = await open_store(args)
    try:
        here = os.getcwd()
        for info in await store.list():
            if info.header.get("cwd") == here:
                return info.id
    finally:
        await ctx.dispose()
    raise StoreError(f"no stored session for this folder ({here})")


# -- commands --------------------------------------------------------------------------------


async def recorded_model(args: argparse.Namespace, session_id: str) -> str | None:
    """The model of the session's latest ``request/header`` (read-only: no lock, no repair)."""
    store, ctx = await open_store(args)
    try:
        stored = await store.read(session_id)
    finally:
        await ctx.dispose()
    for event in reversed(stored.events):
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


async def cmd_chat(args: argparse.Namespace) -> int:
    if args.continue_:
        args.resume = await newest_session_here(args)
    recorded: str | None = None
    if args.resume and not args.model:
        # Resume continues with the model the session last used; the endpoint comes from the
        # config or the flags.
        from dsh.llm.openai_compat import DEFAULT_MODELS  # the SDK import is slow: only here

        recorded = args.model = await recorded_model(args, args.resume)
        known = recorded in (ECHO_MODEL, *DEFAULT_MODELS) or os.environ.get("DEEPSEEK_BASE_URL")
        if recorded is not None and not args.config and not args.base_url and not known:
            raise UsageError(_unserved(args, recorded))
    entries, base_dir = composition(args)
    ctx = Context()
    try:
        await load_plugins(ctx, entries, base_dir=base_dir)
        app = ctx.get("stdio_app")
        if app is None:
            raise UsageError(
                "the composition has no running stdio-app entry"
                if args.config
                else "the stdio app did not start (is a dependency missing?)"
            )
        if recorded is not None and not ctx.llm.has_model(recorded):
            raise UsageError(_unserved(args, recorded))
        schedule = ctx.get("schedule")
        if schedule is not None:
            schedule.check(app.agent)  # a corrupt schedule log refuses the session
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


def _install_signal_handlers(loop: asyncio.AbstractEventLoop, app: Any) -> Any:
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


async def cmd_sessions(args: argparse.Namespace) -> int:
    if args.action == "import":
        return await sessions_view.import_file(args)
    store, ctx = await open_store(args)
    try:
        if args.action == "list":
            return await sessions_view.list_sessions(store, args)
        if args.action == "show":
            return await sessions_view.show(store, args)
        if args.action == "requests":
            return await sessions_view.requests(store, args)
        if args.action == "rm":
            return await sessions_view.remove(store, args)
        if args.action == "export":
            return await sessions_view.export(store, args)
        raise UsageError(f"unknown sessions action {args.action}")
    finally:
        await ctx.dispose()


class _EscapingFormatter(logging.Formatter):
    """Log lines can quote model or server text: its control characters are shown, not obeyed."""

    def format(self, record: logging.LogRecord) -> str:
        return escape_controls(super().format(record))
async def cmd_reminders(args: argparse.Namespace) -> int:
    from dsh.apps import reminders

    return await reminders.run_command(args, reminders.CliHost(open_store, default_entries, ECHO_MODEL))


def _configure_logging(debug: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_EscapingFormatter("dsh: %(message)s" if not debug else "%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, handlers=[handler])
    if not debug:
        for noisy in ("httpx", "openai", "psycopg", "asyncio"):
            logging.getLogger(noisy).setLevel(logging.ERROR)


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return escape_controls(" ".join(line.strip() for line in text.splitlines() if line.strip()))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    _configure_logging(debug)
    try:
        args = build_parser().parse_args(argv)
        runner = {"chat": cmd_chat, "mcp": mcp_cmd.run, "sessions": cmd_sessions}.get(args.command, cmd_reminders)
        try:
            status = asyncio.run(runner(args))
            sys.stdout.flush()  # here, so a reader that left shows as a broken pipe, not at exit
            return status
        except LoadError as exc:
            # A store refusing a session (not found, corrupt, locked) is a runtime failure,
            # even when it surfaces while the composition loads.
            if isinstance(exc.__cause__, StoreError):
                raise exc.__cause__ from None
            if isinstance(exc.__cause__, StoreUnwritable):
                raise UsageError(str(exc.__cause__)) from None
            raise
    except (UsageError, LoadError, ConfigError, msgspec.ValidationError) as exc:
        if debug:
            raise
        print(f"dsh: {_one_line(exc)}", file=sys.stderr)
        return 2
    except StoreError as exc:
        if debug:
            raise
        print(f"dsh: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if pipes.is_broken_pipe(exc):
            # stdout's reader went away (``| head``): stop quietly, as Unix tools do.
            pipes.silence_stdout()
            return pipes.EXIT_PIPE
        if debug:
            raise
        print(f"dsh: {_one_line(exc)} (run with --debug for details)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
