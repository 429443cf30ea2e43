"""What ``/hooks`` and ``/skills`` print in ``dsh chat``, and ``dsh skills list``.

``/hooks``: each hook in force (event, matcher, command, the file it came from), then each
project settings file not in force because it is untrusted. ``/skills`` and ``dsh skills list``:
each skill's name, where it was found, its ``SKILL.md`` and its description. ``dsh skills list
--json`` prints one JSON array of ``{name, description, path, source}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, TypeVar

from dsh.apps.escape import escape_controls

__all__ = ["add_parser", "listing", "run"]

P = TypeVar("P", bound=argparse.ArgumentParser)


def listing(ctx: Any, what: str, agent: Any = None) -> list[str]:
    """The lines of ``/hooks`` or ``/skills`` for the composition in ``ctx``."""
    if what == "hooks":
        from dsh.plugins.hooks import HOOKS

        hooks = ctx.get(HOOKS)
        return hooks.describe() if hooks is not None else ["the hooks plugin is not mounted"]
    from dsh.plugins.skills import SKILLS

    skills = ctx.get(SKILLS)
    if skills is None:
        return ["the skills plugin is not mounted"]
    session = getattr(agent, "session", None)
    cwd = Path((session.header.get("cwd") if session is not None else None) or os.getcwd())
    found = skills.skills(cwd)
    return [f"{s.name}  [{s.source}]  {s.path}: {s.description}" for s in found] or ["no skills found"]


def add_parser(commands: argparse._SubParsersAction[P], parser_class: type[P]) -> None:
    """Add ``dsh skills list`` to the command parsers."""
    skills = commands.add_parser("skills", help="skills (SKILL.md folders) the model can load")
    sub = skills.add_subparsers(dest="action", required=True, parser_class=parser_class)
    listing_ = sub.add_parser("list", help="every skill seen from this folder, with its source")
    listing_.add_argument("--json", action="store_true", help="one JSON array")
    listing_.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")


async def run(args: argparse.Namespace) -> int:
    from dsh.plugins.skills.discovery import discover

    found, warnings = discover(Path.cwd())
    for warning in warnings:
        sys.stderr.write(f"dsh: {escape_controls(warning)}\n")
    if args.json:
        rows = [{"name": s.name, "description": s.description, "path": str(s.path), "source": s.source} for s in found]
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return 0
    if not found:
        print("no skills found (looked in .dsh/skills, .agents/skills, .claude/skills, the dsh home and ~/.claude/skills)")
    for s in found:
        print(escape_controls(f"{s.name}  [{s.source}]  {s.path}\n  {s.description}"))
    return 0
