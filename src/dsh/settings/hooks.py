"""The ``hooks`` section: Claude Code's shape, the same in dsh's own files.

``{"hooks": {"<Event>": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "...",
"timeout": 60}]}]}}``. Keys dsh does not use (``statusMessage``, ``async``, a group's other
fields) are accepted and ignored, as Claude Code's files carry them; a hook of another
``type`` (``prompt``, ``http``...) is kept and skipped by the hooks plugin with a warning.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from dsh.settings.sections import Section, register_section
from dsh.trust import Command

__all__ = ["HOOKS", "HookCommand", "HooksSection", "MatcherGroup"]


class HookCommand(msgspec.Struct, frozen=True):
    type: str = "command"
    command: str | None = None
    timeout: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """Seconds (Claude Code's unit); the plugin's default (60) when absent."""


class MatcherGroup(msgspec.Struct, frozen=True):
    matcher: str | None = None
    hooks: list[HookCommand] = msgspec.field(default_factory=list)


HooksSection = dict[str, list[MatcherGroup]]


def _commands(value: HooksSection) -> list[Command]:
    return [
        Command(
            f'hook {event}{f" {group.matcher!r}" if group.matcher else ""}',
            argv=("sh", "-c", hook.command),
        )
        for event, groups in value.items()
        for group in groups
        for hook in group.hooks
        if hook.type == "command" and hook.command
    ]


HOOKS = register_section(Section("hooks", HooksSection, _commands))
