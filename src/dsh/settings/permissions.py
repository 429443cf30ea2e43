"""The ``permissions`` section: Claude Code's shape, the same in dsh's own files.

``{"permissions": {"allow": [rule], "ask": [rule], "deny": [rule]}}``, each rule in the syntax
of :mod:`dsh.permissions` (``Bash(npm test:*)``, ``write(src/**)``, ``mcp__github__*``). Other
keys Claude Code's files carry there (``defaultMode``, ``additionalDirectories``) are accepted
and ignored. The workspace tools get these rules through :func:`dsh.apps.permission_flags.settings_rules`;
a project file's rules apply only once the user trusts it, and ``dsh trust`` lists its allow
rules as what it would grant.
"""

from __future__ import annotations

import msgspec

from dsh.settings.sections import Section, register_section
from dsh.trust import Command

__all__ = ["PERMISSIONS", "PermissionsSection"]


class PermissionsSection(msgspec.Struct, frozen=True):
    allow: list[str] = msgspec.field(default_factory=list)
    ask: list[str] = msgspec.field(default_factory=list)
    deny: list[str] = msgspec.field(default_factory=list)

    def __bool__(self) -> bool:  # an empty section grants nothing (and needs no trust)
        return bool(self.allow or self.ask or self.deny)


def _grants(value: PermissionsSection) -> list[Command]:
    return [Command("permission allow", argv=(rule,)) for rule in value.allow]


PERMISSIONS = register_section(Section("permissions", PermissionsSection, commands=_grants))
