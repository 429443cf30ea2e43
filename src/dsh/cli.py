"""The ``dsh`` command line: ``dsh chat``, ``dsh run``, ``dsh sessions``, ``dsh acp``, ``dsh mcp``
and ``dsh reminders``.

Owns argument parsing, the built-in default composition (``mock-echo`` or ``openai-llm``,
``echo-tool``, the workspace tools, MCP discovery, ``time-context``, ``schedule``, JSONL sessions
under ``$DSH_HOME/sessions``, ``stdio-app``), and turning every error a person can cause into one
line on stderr: exit 2 for usage and configuration errors, 1 for runtime failures, never a
traceback unless ``--debug``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.metadata
import logging
import os
import platform
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, NoReturn

import msgspec

from dsh import _zones
from dsh.apps import mcp_cmd, pipes, salvage, session_ids
from dsh.apps import sessions as sessions_view
from dsh.apps.escape import escape_controls
from dsh.apps.home import default_root
from dsh.apps.store_check import StoreUnwritable
from dsh.compose import APP_NAMES, DEFAULT_ROOT, ECHO_MODEL, STORE_NAMES, resolve_entry_paths
from dsh.compose import open_store as open_store_by_options
from dsh.errors import UsageError
from dsh.persistence.base import SessionStore, StoreError
from dsh.runtime import ConfigError, Context
from dsh.runtime.loader import LoadError, PluginEntry, load_config_file, load_plugins

log = logging.getLogger("dsh")

# UsageError, APP_NAMES, STORE_NAMES and DEFAULT_ROOT are re-exported for older imports.
__all__ = ["APP_NAMES", "DEFAULT_ROOT", "STORE_NAMES", "UsageError", "build_parser", "main", "open_store"]
WORKSPACE_NAMES = frozenset({"workspace-tools", "dsh.tools.workspace.plugin", "dsh.tools.workspace"})
SANDBOX_MODES = ("read-only", "workspace-write", "danger-full-access")
DEFAULT_ROOT_HELP = "$DSH_HOME/sessions; DSH_HOME defaults to ${XDG_DATA_HOME:-~/.local/share}/dsh"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


# -- parsing ---------------------------------------------------------------------------------


DEBUG_HELP = "show tracebacks and debug logs on stderr"


def _store_flags(group: argparse._ArgumentGroup) -> None:
    """The store flags every command shares (one definition, so help and checks agree)."""
    group.add_argument("--store", choices=["jsonl", "sqlite", "postgres"], help="session store kind (default: jsonl)")
    group.add_argument("--root", metavar="DIR", help=f"JSONL sessions folder (default: {DEFAULT_ROOT_HELP})")
    group.add_argument("--sqlite", metavar="FILE", help="SQLite database file (with --store sqlite)")
    group.add_argument("--dsn", metavar="URL", help="PostgreSQL URL (with --store postgres; default $DSH_DATABASE_URL)")


def _store_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("session store")
    _store_flags(group)
    group.add_argument("--config", metavar="FILE", help="use the store a YAML composition mounts")


def _agent_options(parser: argparse.ArgumentParser) -> None:
    """The model, session and store options ``dsh chat`` and ``dsh run`` share."""
    parser.add_argument("--config", metavar="FILE", help="YAML plugin composition (relative paths in it resolve against its folder)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--resume", metavar="SESSION_ID", help="continue a stored session (any unique id prefix)")
    which.add_argument("--continue", dest="continue_", action="store_true", help="continue the newest session of this folder")
    parser.add_argument("--model", metavar="NAME", help="model name (default: mock-echo, keyless)")
    parser.add_argument("--base-url", metavar="URL", help="any OpenAI-compatible endpoint")
    parser.add_argument(
        "--timeout", type=float, metavar="SECONDS",
        help="end the turn with an error when the model sends nothing for this long (default 120)",
    )
    system = parser.add_mutually_exclusive_group()
    system.add_argument("--system", metavar="TEXT", help="replace the default system prompt with TEXT")
    system.add_argument("--system-file", metavar="FILE", help="replace the default system prompt with FILE's text")
    parser.add_argument("--sandbox", choices=list(SANDBOX_MODES), help="bash/file sandbox (default: workspace-write)")
    parser.add_argument("--approval", choices=["ask", "never"], help="approval policy (default: ask)")
    _store_flags(parser.add_argument_group("session store"))
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)


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
    parser = _Parser(
        prog="dsh",
        description="Agents whose history is a durable, time-aware event log.",
        epilog="Run 'dsh COMMAND --help' for a command's options. Bare 'dsh' prints this and exits 2.",
    )
    parser.add_argument("--version", action=_VersionAction, help="print the dsh, Python and zone data versions")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    chat = commands.add_parser("chat", help="talk to an agent over stdin/stdout")
    _agent_options(chat)
    chat.add_argument("--plain", action="store_true", help="plain transcript, no colour or line editing")

    _acp_parser(commands, chat)

    run = commands.add_parser("run", help="run one turn and print the final reply (for scripts)")
    run.add_argument("prompt", metavar="PROMPT", help="the prompt; - reads it from stdin")
    _agent_options(run)
    run.add_argument(
        "--output-format", choices=["text", "json", "stream-json"], default="text",
        help="text: the final reply; json: one object with text, sessionId, reason, usage, model; "
        "stream-json: each durable event as one JSON line as it is appended",
    )

    sessions = commands.add_parser("sessions", help="inspect, export, import and salvage stored sessions")
    sub = sessions.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=_Parser)
    listing = sub.add_parser("list", help="this folder's sessions, newest first")
    listing.add_argument("--all", action="store_true", help="sessions of every folder")
    listing.add_argument("--json", action="store_true", help="one JSON array")
    listing.add_argument("--limit", type=int, metavar="N", help="at most N sessions")
    show = sub.add_parser("show", help="the transcript as the model saw it")
    show.add_argument("id", metavar="ID", help="session id (any unique prefix)")
    show.add_argument("--events", action="store_true", help="every raw event")
    show.add_argument("--json", action="store_true", help="the durable log verbatim")
    show.add_argument("--follow", action="store_true", help="keep printing events as they are appended")
    requests = sub.add_parser("requests", help="rebuild each model request from the log alone")
    requests.add_argument("id", metavar="ID", help="session id (any unique prefix)")
    requests.add_argument("--step", metavar="TURN.STEP", help="only this step (e.g. 2.1)")
    requests.add_argument("--json", action="store_true", help="a JSON array, written one request at a time")
    remove = sub.add_parser("rm", help="delete a session")
    remove.add_argument("id", metavar="ID", help="session id (any unique prefix)")
    remove.add_argument("--yes", action="store_true", help="do not ask")
    export = sub.add_parser("export", help="write a session as JSONL (format v0)")
    export.add_argument("id", metavar="ID", help="session id (any unique prefix)")
    export.add_argument("-o", "--output", metavar="FILE", help="write to FILE (0600) instead of stdout")
    importing = sub.add_parser("import", help="store a JSONL session log (a torn tail is repaired as load does)")
    importing.add_argument("file", metavar="FILE", help="a JSONL v0 session log")
    salvage = sub.add_parser("salvage", help="copy the longest valid committed prefix of a corrupt session into a new one")
    salvage.add_argument("id", metavar="ID", help="session id (any unique prefix); the original is never modified")
    for sub_parser in (listing, show, requests, remove, export, importing, salvage):
        _store_options(sub_parser)
        sub_parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    mcp_cmd.add_parser(commands, _Parser)
    from dsh.apps import reminders

    reminders.add_parser(commands, _store_options)
    return parser


ACP_SKIPS = frozenset({"help", "resume", "continue_", "plain"})


def _acp_parser(commands: Any, chat: argparse.ArgumentParser) -> None:
    """``dsh acp`` takes dsh chat's options, less those of a terminal or a single session."""
    acp = commands.add_parser("acp", help="serve the Agent Client Protocol on stdin/stdout (for editors)")
    for action in chat._actions:
        if action.dest not in ACP_SKIPS:
            acp._add_action(action)
    acp.set_defaults(resume=None, continue_=False, plain=False)


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
    app: dict[str, Any] = {"model": model, "persistenceRoot": args.root or str(default_root())}
    app.update(_store_config(args))
    app.update(_system_config(args))
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
def _system_config(args: argparse.Namespace) -> dict[str, Any]:
    """``--system TEXT`` / ``--system-file FILE``: the app's ``systemPrompt``."""
    if getattr(args, "system", None) is not None:
        return {"systemPrompt": args.system}
    path = getattr(args, "system_file", None)
    if path is None:
        return {}
    try:
        return {"systemPrompt": Path(path).read_text(encoding="utf-8")}
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UsageError(f"cannot read --system-file {path}: {reason}") from None


def _with_config_paths(entries: list[PluginEntry], base: Path) -> list[PluginEntry]:
    """Relative paths in a config (persistenceRoot, sqlitePath, root, ...) name places next to
    the config file, as its ``.py`` plugin names do, not next to wherever dsh was started."""
    return [resolve_entry_paths(e, base) for e in entries]


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
    base = path.resolve().parent
    entries = _apply_timeout(args, _with_config_paths(load_config_file(path), base))
    if args.base_url:
        # The composition's model plugin has its own endpoint; quietly keeping it would be a lie.
        raise UsageError("--base-url only applies without --config; set baseURL in the config's openai-llm entry")
    mounted = [e for e in entries if e.name in STORE_NAMES and not e.disabled]
    check_store_flags(args.store, args, mounted=mounted[-1].id if mounted else None)
    apps = [e for e in entries if e.name in APP_NAMES and not e.disabled]
    if not apps:
        # Load anyway: a broken entry deserves its own error before "no app" is reported.
        return entries, base
    app = apps[0]
    config = dict(app.config or {})
    if args.model:
        config["model"] = args.model
    if args.root:
        config["persistenceRoot"] = args.root
    config.update(_store_config(args))
    config.update(_system_config(args))
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
    return ordered, base


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
    if args.resume and not args.model:
        # Resume continues with the model the session last used; the endpoint comes from the
        # config or the flags.
        from dsh.llm.openai_compat import DEFAULT_MODELS  # the SDK import is slow: only here

        recorded = args.model = await recorded_model(args, args.resume)
        known = recorded in (ECHO_MODEL, *DEFAULT_MODELS) or os.environ.get("DEEPSEEK_BASE_URL")
        if recorded is not None and not args.config and not args.base_url and not known:
            raise UsageError(_unserved(args, recorded))
    entries, base_dir = composition(args)
    return entries, base_dir, recorded


async def load_app(ctx: Context, args: argparse.Namespace) -> Any:
    """Load ``dsh chat``'s composition into ``ctx`` and return its running stdio app."""
    entries, base_dir, recorded = await prepare_agent(args)
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
    return app


async def cmd_chat(args: argparse.Namespace) -> int:
    ctx = Context()
    try:
        app = await load_app(ctx, args)
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


async def cmd_acp(args: argparse.Namespace) -> int:
    """``dsh acp``: dsh chat's composition with ``acp-app`` in place of ``stdio-app``."""
    from dsh.apps.acp import app as acp_app
    from dsh.apps.acp.server import AcpOptions, serve

    entries, base_dir = composition(args)
    ctx = Context()
    try:
        await load_plugins(ctx, acp_app.swap_app(entries, APP_NAMES), base_dir=base_dir)
        config = ctx.get(acp_app.ACP_APP)
        if config is None:
            raise UsageError("the composition has no running stdio-app entry to serve ACP with")
        options = AcpOptions(model=args.model, default_model=config.model, permission_timeout=config.permission_timeout_seconds)
        await serve(ctx, options)
    finally:
        await ctx.dispose()
    return 0


async def cmd_sessions(args: argparse.Namespace) -> int:
    if args.action == "import":
        return await salvage.import_file(args, open_store)
    store, ctx = await open_store(args)
    try:
        if getattr(args, "id", None):
            args.id = await session_ids.resolve(store, args.id)
        if args.action == "salvage":
            return await salvage.salvage(store, args)
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


def _one_line(exc: BaseException | str) -> str:
    text = exc if isinstance(exc, str) else str(exc) or type(exc).__name__
    return escape_controls(" ".join(line.strip() for line in text.splitlines() if line.strip()))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    _configure_logging(debug)
    args: argparse.Namespace | None = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            # Bare ``dsh``: the usage, and exit 2 as for any other missing argument.
            parser.print_help(sys.stderr)
            return 2
        if args.command == "run":
            from dsh.apps.run import cmd_run

            runner: Callable[[argparse.Namespace], Coroutine[Any, Any, int]] = functools.partial(cmd_run, load_app=load_app)
        else:
            runner = {"chat": cmd_chat, "acp": cmd_acp, "mcp": mcp_cmd.run, "sessions": cmd_sessions}.get(args.command, cmd_reminders)
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
    except (UsageError, LoadError, ConfigError, msgspec.ValidationError, session_ids.AmbiguousId) as exc:
        if debug:
            raise
        print(f"dsh: {_one_line(exc)}", file=sys.stderr)
        return 2
    except StoreError as exc:
        if debug:
            raise
        named = getattr(args, "id", None) or getattr(args, "resume", None)
        print(f"dsh: {_one_line(salvage.explain(exc, named))}", file=sys.stderr)
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
