"""The hooks in force: collected from the settings files, and which of them an event selects.

Claude Code's tool names and dsh's both match (a matcher is tested against each name a tool
goes by); the payload's ``tool_name`` is the Claude Code name where there is one, so existing
scripts that test ``tool_name == "Bash"`` keep working:

| Claude Code | dsh |
|---|---|
| ``Bash`` | ``bash`` |
| ``Read`` | ``read`` |
| ``Write`` | ``write`` |
| ``Edit``, ``MultiEdit`` | ``edit`` |
| ``Glob`` | ``glob`` |
| ``Grep`` | ``grep`` |
| ``TodoWrite`` | ``todo_write`` |
| ``BashOutput`` | ``job_output`` |
| ``KillShell`` | ``job_kill`` |
| ``mcp__<server>__<tool>`` | the same |

A matcher is Claude Code's: absent, ``""`` or ``"*"`` matches everything; a plain name or
``A|B`` list matches exactly; anything else is a regular expression (``Edit|Write``,
``mcp__github__.*``) searched in the name. A matcher that is not a valid expression is a
configuration error naming the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import msgspec

from dsh.runtime.config import ConfigError
from dsh.settings import Settings
from dsh.settings.hooks import HooksSection

__all__ = ["CLAUDE_NAMES", "EVENTS", "Config", "Hook", "claude_name", "collect", "matches", "names_of"]

EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Stop",
    "SubagentStop",
    "PreCompact",
    "SessionEnd",
    "Notification",
)
TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse"})

CLAUDE_NAMES: dict[str, str] = {
    "bash": "Bash",
    "read": "Read",
    "write": "Write",
    "edit": "Edit",
    "glob": "Glob",
    "grep": "Grep",
    "todo_write": "TodoWrite",
    "job_output": "BashOutput",
    "job_kill": "KillShell",
}
_ALIASES: dict[str, tuple[str, ...]] = {"edit": ("MultiEdit",)}
_LITERAL = re.compile(r"^[A-Za-z0-9_|]+$")


class Config(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``defaultTimeoutSeconds`` (60, Claude Code's), ``maxStopBlocks`` (3: how many times
    ``Stop`` hooks may continue one turn), ``summaryChars`` (500: output kept in the log)."""

    default_timeout_seconds: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    max_stop_blocks: Annotated[int, msgspec.Meta(ge=0)] = 3
    summary_chars: Annotated[int, msgspec.Meta(ge=3)] = 500


@dataclass(frozen=True)
class Hook:
    """One command hook in force."""

    event: str
    matcher: str | None
    command: str
    timeout_s: float | None
    source: Path
    scope: str


def claude_name(tool_name: str) -> str:
    return CLAUDE_NAMES.get(tool_name, tool_name)


def names_of(tool_name: str) -> tuple[str, ...]:
    """Every name a tool goes by for a matcher: dsh's, Claude Code's and its aliases."""
    return (tool_name, *((CLAUDE_NAMES[tool_name],) if tool_name in CLAUDE_NAMES else ()), *_ALIASES.get(tool_name, ()))


def _pattern(matcher: str | None) -> re.Pattern[str] | None:
    if matcher in (None, "", "*") or _LITERAL.match(matcher or ""):
        return None
    return re.compile(matcher or "")


def matches(matcher: str | None, subjects: Iterable[str]) -> bool:
    if matcher in (None, "", "*"):
        return True
    assert matcher is not None
    names = list(subjects)
    if _LITERAL.match(matcher):
        wanted = set(matcher.split("|"))
        return any(name in wanted for name in names)
    pattern = re.compile(matcher)
    return any(pattern.search(name) for name in names)


def collect(settings: Settings) -> tuple[list[Hook], list[str]]:
    """The command hooks of every trusted file, in order, and one warning per skipped entry."""
    hooks: list[Hook] = []
    warnings: list[str] = []
    for entry in settings.section("hooks"):
        value: HooksSection = entry.value
        for event, groups in value.items():
            if event not in EVENTS:
                warnings.append(f"{entry.file}: hook event {event!r} is not one dsh runs; skipped")
                continue
            for group in groups:
                try:
                    _pattern(group.matcher)
                except re.error as exc:
                    raise ConfigError(f"{entry.file}: hooks.{event}: invalid matcher {group.matcher!r} ({exc})") from None
                for hook in group.hooks:
                    if hook.type != "command" or not hook.command:
                        warnings.append(f"{entry.file}: a {hook.type!r} hook on {event} is not run (only command hooks run)")
                        continue
                    hooks.append(Hook(event, group.matcher, hook.command, hook.timeout, entry.file, entry.scope))
    return hooks, warnings
