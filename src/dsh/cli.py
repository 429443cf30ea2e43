"""The ``dsh`` command line: ``dsh chat``, ``dsh run``, ``dsh sessions``, ``dsh acp``, ``dsh mcp``,
``dsh trust``, ``dsh skills`` and ``dsh reminders``.

Owns argument parsing, dispatch to the command bodies in :mod:`dsh.apps` (each imported only
when its command runs), and turning every error a person can cause into one line on stderr:
exit 2 for usage and configuration errors, 1 for runtime failures, never a traceback unless
``--debug``. What the flags select (the default composition, the store) is
:mod:`dsh.apps.entries`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

import msgspec

from dsh._redact import redact_urls
from dsh.apps import compaction_default, mcp_cmd, permission_flags, pipes, session_ids
from dsh.apps.entries import (
    SANDBOX_MODES,
    check_store_flags,
    composition,
    default_entries,
    open_store,
)
from dsh.apps.escape import escape_controls, guard_stdio
from dsh.apps.store_check import StoreUnwritable
from dsh.compose import APP_NAMES, DEFAULT_ROOT, ECHO_MODEL, STORE_NAMES
from dsh.errors import UsageError
from dsh.persistence.base import StoreError, StoreUnavailable
from dsh.runtime import ConfigError
from dsh.runtime.loader import LoadError

log = logging.getLogger("dsh")

# Only build_parser and main are this module's own; the rest is re-exported for older imports.
__all__ = [
    "APP_NAMES",
    "DEFAULT_ROOT",
    "STORE_NAMES",
    "UsageError",
    "build_parser",
    "check_store_flags",
    "composition",
    "default_entries",
    "main",
    "open_store",
]
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
    parser.add_argument(
        "-C", "--cd", metavar="DIR",
        help="work in DIR (the workspace) as if dsh were started there; later relative paths are relative to DIR",
    )
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
    permission_flags.add_arguments(parser)
    compaction_default.add_arguments(parser)
    parser.add_argument(
        "--time-zone", metavar="ZONE",
        help="the zone each prompt carries (UTC or an IANA Area/Location name; default: this process's zone)",
    )
    _store_flags(parser.add_argument_group("session store"))
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)


def version_text() -> str:
    """``dsh --version``: dsh, Python, and the zone data every zoned time is rendered with."""
    import importlib.metadata  # these cost more than the rest of the parser: only --version pays
    import platform

    from dsh import _zones

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

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
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
        help="text: the final reply; json: one object with text, sessionId, reason, usage, costUsd, model; "
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
    show.add_argument("--tree", action="store_true", help="the whole delegation tree (parent and subagent sessions)")
    requests = sub.add_parser("requests", help="rebuild each model request from the log alone")
    requests.add_argument("id", metavar="ID", help="session id (any unique prefix)")
    requests.add_argument("--step", metavar="TURN.STEP", help="only this step (e.g. 2.1)")
    requests.add_argument("--json", action="store_true", help="a JSON array, written one request at a time")
    remove = sub.add_parser("rm", aliases=["delete"], help="delete a session and its workspace snapshots")
    remove.add_argument("id", metavar="ID", help="session id (any unique prefix)")
    remove.add_argument("--yes", action="store_true", help="do not ask")
    export = sub.add_parser("export", help="write a session as JSONL (format v0)")
    export.add_argument("id", metavar="ID", help="session id (any unique prefix)")
    export.add_argument("-o", "--output", metavar="FILE", help="write to FILE (0600) instead of stdout")
    importing = sub.add_parser("import", help="store a JSONL session log (a torn tail is repaired as load does)")
    importing.add_argument("file", metavar="FILE", help="a JSONL v0 session log")
    salvage = sub.add_parser("salvage", help="copy the longest valid committed prefix of a corrupt session into a new one")
    salvage.add_argument("id", metavar="ID", help="session id (any unique prefix); the original is never modified")
    trace = sub.add_parser("trace", help="replay a session as OpenTelemetry GenAI spans, with the log's timestamps")
    trace.add_argument("id", metavar="ID", help="session id (any unique prefix)")
    trace.add_argument("--otlp", metavar="URL", help="send to this OTLP/HTTP collector (http://host:4318)")
    trace.add_argument("--json", action="store_true", help="print the spans as one OTLP JSON object")
    trace.add_argument("--content", action="store_true", help="include message contents (off by default)")
    for sub_parser in (listing, show, requests, remove, export, importing, salvage, trace):
        _store_options(sub_parser)
        sub_parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    _rewind_parsers(sub)
    from dsh.apps import reminders

    mcp_cmd.add_parser(commands, _Parser)
    _trust_parser(commands)
    from dsh.apps import extensions_view

    extensions_view.add_parser(commands, _Parser)

    reminders.add_parser(commands, _store_options)
    return parser


def _rewind_parsers(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``dsh sessions diff``, ``rewind`` and ``gc`` (their bodies: :mod:`dsh.apps.rewind_cmd`)."""
    from dsh.rewind import DEFAULT_RETENTION_DAYS
    diff = sub.add_parser("diff", help="what the agent changed in the workspace, as a unified diff")
    diff.add_argument("id", metavar="ID", help="session id (any unique prefix)")
    diff.add_argument("--turn", type=int, metavar="N", help="only turn N (default: the whole session)")
    rewind = sub.add_parser("rewind", help="restore the files and/or the conversation to before a turn")
    rewind.add_argument("id", metavar="ID", help="session id (any unique prefix)")
    rewind.add_argument("--to-turn", type=int, required=True, metavar="N", help="go back to before turn N")
    what = rewind.add_mutually_exclusive_group()
    what.add_argument("--files", dest="what", action="store_const", const="files", help="restore the workspace files (default)")
    what.add_argument("--conversation", dest="what", action="store_const", const="conversation",
                      help="fork a new session holding the conversation before turn N (the original is kept)")
    what.add_argument("--both", dest="what", action="store_const", const="both", help="both of the above")
    rewind.add_argument("--force", action="store_true", help="overwrite files changed after the agent")
    gc = sub.add_parser("gc", help="prune workspace snapshots of old and deleted sessions")
    gc.add_argument("--older-than", type=float, default=DEFAULT_RETENTION_DAYS, metavar="DAYS",
                    help=f"drop snapshots older than DAYS (default {DEFAULT_RETENTION_DAYS})")
    for parser in (diff, rewind, gc):
        _store_options(parser)
        parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)


def _trust_parser(commands: argparse._SubParsersAction[_Parser]) -> None:
    from dsh.apps import trust_cmd

    trust_cmd.add_parser(commands, _Parser)


ACP_SKIPS = frozenset({"help", "resume", "continue_", "plain"})


def _acp_parser(commands: argparse._SubParsersAction[_Parser], chat: argparse.ArgumentParser) -> None:
    """``dsh acp`` takes dsh chat's options, less those of a terminal or a single session."""
    acp = commands.add_parser("acp", help="serve the Agent Client Protocol on stdin/stdout (for editors)")
    for action in chat._actions:
        if action.dest not in ACP_SKIPS:
            acp._add_action(action)
    acp.set_defaults(resume=None, continue_=False, plain=False)


# -- dispatch --------------------------------------------------------------------------------

Command = Callable[[argparse.Namespace], Coroutine[object, object, int]]


def _command(name: str) -> Command:
    """The body of command ``name``, imported now so other commands do not pay for it."""
    if name == "chat":
        from dsh.apps.chat import cmd_chat

        return cmd_chat
    if name == "run":
        from dsh.apps.run import cmd_run

        return cmd_run
    if name == "acp":
        from dsh.apps.acp.command import cmd_acp

        return cmd_acp
    if name == "sessions":
        from dsh.apps import sessions_cmd

        return sessions_cmd.run
    if name == "mcp":
        return mcp_cmd.run
    if name == "trust":
        from dsh.apps import trust_cmd

        return trust_cmd.run
    if name == "skills":
        from dsh.apps import extensions_view

        return extensions_view.run
    from dsh.apps import reminders

    return lambda args: reminders.run_command(args, reminders.CliHost(open_store, default_entries, ECHO_MODEL))


def _terminal_guard(args: argparse.Namespace) -> contextlib.AbstractContextManager[None]:
    """What every command prints to a terminal goes through the one sanitiser
    (:func:`dsh.apps.escape.guard_stdio`), except where dsh draws styles of its own and escapes
    what it shows itself: ``dsh chat``, ``dsh acp`` (a protocol stream) and the timeline of
    ``dsh sessions show``."""
    command, action = args.command, getattr(args, "action", None)
    if command in ("chat", "acp") or (command == "sessions" and action == "show" and not args.json):
        return contextlib.nullcontext()
    json_out = (
        bool(getattr(args, "json", False))
        or getattr(args, "output_format", "text") != "text"
        or (command == "sessions" and action == "export")
    )
    return guard_stdio(json=json_out)


# -- errors ----------------------------------------------------------------------------------


class _EscapingFormatter(logging.Formatter):
    """Log lines can quote model or server text: its control characters are shown, not obeyed,
    and credentials in URLs are redacted."""

    def format(self, record: logging.LogRecord) -> str:
        # Any URL in a log line (httpx's request lines under --debug) loses its credentials.
        return escape_controls(redact_urls(super().format(record)))


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


def _change_folder(folder: str | None) -> None:
    """``-C``/``--cd DIR``: the chosen workspace, as if dsh were started in DIR."""
    if folder is None:
        return
    try:
        os.chdir(folder)
    except OSError as exc:
        raise UsageError(f"--cd {folder}: {exc.strerror or 'cannot enter it'}") from None


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
        _change_folder(getattr(args, "cd", None))
        permission_flags.announce(args)
        runner = _command(args.command)
        try:
            with _terminal_guard(args):
                status = asyncio.run(runner(args))
                sys.stdout.flush()  # here, so a reader that left shows as a broken pipe, not at exit
            return status
        except LoadError as exc:
            # A store that cannot be reached at start-up is a configuration mistake (exit 2), like
            # a SQLite file that is not a database; a store refusing a session (not found,
            # corrupt, locked) is a runtime failure, even when it surfaces while loading.
            if isinstance(exc.__cause__, (StoreUnwritable, StoreUnavailable)):
                raise UsageError(str(exc.__cause__)) from None
            if isinstance(exc.__cause__, StoreError):
                raise exc.__cause__ from None
            if isinstance(exc.__cause__, UsageError):
                raise exc.__cause__ from None  # its own line (a refused workspace), not the entry's
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
        from dsh.apps.salvage import explain

        print(f"dsh: {_one_line(explain(exc, named))}", file=sys.stderr)
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
