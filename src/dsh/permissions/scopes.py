"""The session scopes an approval prompt offers for one call, narrowest first, each with the
sentence the prompt shows before the person answers.

- ``bash``: the exact command; and, for a simple command (no :data:`~dsh.permissions.rules.SHELL_META`),
  a prefix of its first word and, when it looks like a subcommand, its second
  (``npm test --watch`` offers ``Bash(npm test:*)``). No prefix is offered for a command whose
  first word runs arbitrary code from its arguments (``bash``, ``env``, ``sudo``, ``python``…)
  or sets a variable (``X=1 cmd``).
- ``write`` / ``edit``: the exact resolved path, then its folder (``Write(//dir/**)``), unless
  the folder is ``/``.
- any other tool: every call of that tool (``mcp__server__tool``).
- ``bash``, ``write``, ``edit`` and ``read`` without their subject: nothing (no session answer).
"""

from __future__ import annotations

import os
import re
from typing import Final

from dsh.permissions.rules import Rule, RuleError, has_shell_meta, literal_path, parse_rule

__all__ = ["Scope", "session_scopes"]

Scope = tuple[Rule, str]

# First words whose arguments are themselves code or a command: a prefix of them allows anything.
_RUNNERS: Final = frozenset(
    {
        "bash", "sh", "zsh", "dash", "fish", "ksh", "env", "sudo", "doas", "su", "exec", "eval",
        "command", "builtin", "xargs", "nohup", "timeout", "nice", "ionice", "setsid", "time",
        "watch", "strace", "python", "python3", "node", "perl", "ruby", "php", "lua", "deno",
        "bun", "npx", "uvx", "pipx", "source", ".",
    }
)
_PREFIX: Final = re.compile(r"[^\s=]+(?: [A-Za-z0-9][A-Za-z0-9_.:-]*)?(?=[ \t]|$)")

_SUBJECT_TOOLS: Final = frozenset({"bash", "write", "edit", "read"})
_PATH_RULE: Final = {"write": "Write", "edit": "Edit", "read": "Read"}
_PATH_WORDS: Final = {
    "write": ("writes to {}", "writes under {}/"),
    "edit": ("edits and writes of {}", "edits and writes under {}/"),
    "read": ("reads of {}", "reads under {}/"),
}


def _bash_scopes(command: str) -> list[Scope]:
    scopes: list[Scope] = [(Rule("Bash", command), f'the bash command "{command}" exactly')]
    if has_shell_meta(command):
        return scopes
    match = _PREFIX.match(command)
    if match is None:
        return scopes
    prefix = match.group()
    first = prefix.split(" ", 1)[0]
    if prefix == command or os.path.basename(first) in _RUNNERS or first.startswith("python"):
        return scopes
    scopes.append((Rule("Bash", prefix, prefix=True), f'bash commands starting with "{prefix}"'))
    return scopes


def session_scopes(tool_name: str, subject: str | None) -> list[Scope]:
    """What "allow for this session" may cover for this call, narrowest first. A scope whose
    rule would not read back as itself (a command ending in ``:*`` or holding ``*``) is left
    out, so the durable record always means exactly what was shown."""
    return [(rule, words) for rule, words in _scopes(tool_name, subject) if _round_trips(rule)]


def _round_trips(rule: Rule) -> bool:
    try:
        return parse_rule(str(rule)) == rule
    except RuleError:
        return False


def _scopes(tool_name: str, subject: str | None) -> list[Scope]:
    if tool_name in _SUBJECT_TOOLS and not subject:
        return []
    if tool_name == "bash":
        assert subject is not None
        return _bash_scopes(subject)
    if tool_name in _PATH_RULE:
        assert subject is not None
        rule_tool = _PATH_RULE[tool_name]
        exact, under = _PATH_WORDS[tool_name]
        scopes: list[Scope] = [(Rule(rule_tool, literal_path(subject)), exact.format(subject))]
        folder = os.path.dirname(subject)
        if folder not in ("", "/") and subject.startswith("/"):
            scopes.append((Rule(rule_tool, literal_path(folder) + "/**"), under.format(folder)))
        return scopes
    return [(Rule(tool_name), f'every "{tool_name}" call')]
