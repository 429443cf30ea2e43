"""``dsh trust``: review and trust the project files of a folder that can make dsh run something.

Owns the command (``dsh trust [--yes]``, ``--list``, ``--revoke [PATH]``) and the inline offer
terminal-mode ``dsh chat`` makes at start (:func:`offer_at_start`). The kinds of project file
come from the modules that read them (imported here, so each registers its kind); the decisions
and the trust file are :mod:`dsh.trust`'s.

Exit status: 0 when the files are trusted (or there is nothing to trust, or a listing or
revocation succeeded), 1 when the user declined or there was nothing to revoke, 2 for usage
mistakes (a non-interactive stdin without ``--yes``, an unreadable project file).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import TextIO, TypeVar

from dsh import trust
from dsh.apps.escape import escape_controls
from dsh.errors import UsageError

__all__ = ["add_parser", "offer_at_start", "run"]

P = TypeVar("P", bound=argparse.ArgumentParser)

QUESTION = "Trust these project files? [y/N] "
START_QUESTION = "Trust this file and start what it runs? [y/N] "


def add_parser(commands: argparse._SubParsersAction[P], parser_class: type[P]) -> None:
    """Add ``dsh trust`` to the command parsers."""
    cmd = commands.add_parser(
        "trust", help="review and trust this folder's project files (.mcp.json, settings hooks) that run commands"
    )
    mode = cmd.add_mutually_exclusive_group()
    mode.add_argument("--yes", action="store_true", help="trust without asking (for scripts)")
    mode.add_argument("--list", action="store_true", help="every trusted file, and whether it changed since")
    mode.add_argument(
        "--revoke", nargs="?", const="", metavar="PATH",
        help="forget the trust in PATH (default: every project file of this folder)",
    )
    cmd.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")


def _show(text: str) -> str:
    return escape_controls(text.replace("\n", "\\n"))


def describe(file: trust.ProjectFile, why: str, out: TextIO) -> None:
    """The file and every command it would run, in full, one to a line."""
    commands = file.commands()
    out.write(f"{_show(str(file.path))} ({why}) would run:\n")
    for command in commands:
        out.write(f"  {_show(command.full())}\n")
    if not commands:
        out.write("  nothing\n")


def project_files(folder: Path) -> list[trust.ProjectFile]:
    """The folder's project files of every kind dsh reads."""
    # Imported for its side effect, each module registering its kind with the trust registry
    # (here, not at the top: building the command line must not pay for them).
    import dsh.plugins.mcp.mcp_json
    import dsh.plugins.subagent.definitions
    import dsh.settings  # noqa: F401

    return trust.project_files(folder)


def _answer(prompt: str, out: TextIO) -> bool:
    out.write(prompt)
    out.flush()
    line = sys.stdin.readline()
    if not line:
        out.write("\n")
    return line.strip().lower() in ("y", "yes")


def _review(args: argparse.Namespace, folder: Path) -> int:
    out = sys.stdout
    files = project_files(folder)
    if not files:
        names = ", ".join(p for k in trust.kinds() for p in k.locations)
        print(f"no project files here that make dsh run something (looked for {names} in {folder.resolve()})")
        return 0
    pending: list[trust.ProjectFile] = []
    for file in files:
        status, why = trust.check(file)
        if status == "unusable":
            raise trust.TrustFileError(why)
        if status == "trusted":
            out.write(f"{_show(str(file.path))}: trusted\n")
            continue
        describe(file, why, out)
        pending.append(file)
    if not pending:
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError("dsh trust needs a terminal to ask; review the commands above, then run dsh trust --yes")
        if not _answer(QUESTION, out):
            print("nothing trusted")
            return 1
    trust.trust(pending)
    for file in pending:
        print(f"trusted {_show(str(file.path))}")
    return 0


def _list() -> int:
    records = trust.TrustStore().records()
    if not records:
        print(f"no trusted project files (trust file: {trust.trust_path()})")
        return 0
    for record in records:
        path = Path(record.path)
        try:
            current = path.read_bytes()
        except OSError:
            state = "missing"
        else:
            state = "trusted" if hashlib.sha256(current).hexdigest() == record.sha256 else "changed"
        where = "" if str(path.parent) == record.folder else f" (used from {record.folder})"
        print(_show(f"{record.trusted_at}  {state}  {record.kind}  {record.path}{where}"))
    return 0


def _revoke(target: str, folder: Path) -> int:
    dropped = trust.revoke(Path(target) if target else None, folder)
    if not dropped:
        what = f"{target} is not trusted" if target else f"no project file of {folder.resolve()} is trusted"
        print(_show(f"dsh: nothing to revoke: {what}"), file=sys.stderr)
        return 1
    for record in dropped:
        print(_show(f"revoked {record.path}"))
    return 0


async def run(args: argparse.Namespace) -> int:
    folder = Path.cwd()
    try:
        if args.list:
            return _list()
        if args.revoke is not None:
            return _revoke(args.revoke, folder)
        return _review(args, folder)
    except trust.TrustFileError as exc:
        print(f"dsh: {_show(str(exc))}", file=sys.stderr)
        return 1


def offer_at_start(folder: Path, out: TextIO | None = None) -> None:
    """Terminal-mode ``dsh chat``: ask about each untrusted project file before anything starts.

    ``y`` trusts the file (it starts as if trusted before); anything else skips it for this run.
    A file that cannot be trusted (an unusable trust file) is left to the gate's one line.
    """
    stream = out or sys.stdout
    for file in project_files(folder):
        status, why = trust.check(file)
        if status in ("trusted", "unusable") or not file.commands():
            continue
        describe(file, f"not trusted: {why}", stream)
        if _answer(START_QUESTION, stream):
            trust.trust([file])
        else:
            trust.decline(file)
            stream.write("skipped for this run\n")
