"""Permission rules: parsing, printing and matching, in Claude Code's rule syntax.

A rule is ``Tool`` (every call of that tool) or ``Tool(specifier)``:

- ``Bash(git status)``: exactly that command; ``Bash(npm run test:*)``: the command ``npm run
  test`` or ``npm run test`` followed by whitespace and more (a word boundary: not ``npm run
  tests``). A prefix rule never matches a command holding a shell control operator, a
  substitution, a redirection or a line break (:data:`SHELL_META`): ``npm test; rm -rf ~``,
  ``npm test && curl …``, ``npm test $(…)`` and ``npm test > ~/.bashrc`` all ask again. Only an
  exact rule matches such a command, and only that exact text.
- ``Edit(//abs/path)``, ``Write(//abs/dir/**)``, ``Read(…)``: a path pattern, gitignore-like.
  ``//p`` is the absolute path ``/p``, ``~/p`` is under the home folder, ``/p`` is relative to
  the settings file's folder and ``p`` / ``./p`` to the working folder (both need a ``base``).
  ``*`` matches within one path segment, ``**`` any number of segments, ``?`` one character,
  ``\\*`` a literal star.
  ``Edit`` rules cover every built-in tool that changes files (``edit`` and ``write``), as in
  Claude Code; ``Write`` rules cover ``write`` only.
- Any other name (``mcp__server__tool``, ``todo_write``) takes no specifier and matches that
  tool exactly.

Matching fails closed: a path that is not absolute and normalised (``..``, ``.``, ``//``) never
matches, nor does a call of a specifier tool without its subject.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ALIASES",
    "PATH_TOOLS",
    "SHELL_META",
    "Rule",
    "RuleError",
    "has_shell_meta",
    "is_wildcard",
    "literal_path",
    "parse_rule",
]

# Rule tool names (Claude Code's) and the dsh tools each covers.
_COVERS: Final[dict[str, frozenset[str]]] = {
    "Bash": frozenset({"bash"}),
    "Edit": frozenset({"edit", "write"}),
    "Write": frozenset({"write"}),
    "Read": frozenset({"read"}),
}
PATH_TOOLS: Final = frozenset({"Edit", "Write", "Read"})
# Other spellings a rule may use for a tool: dsh's own (lower-case) names of the specifier
# tools, and Claude Code's names of the tools dsh names differently. Printed canonically.
ALIASES: Final[dict[str, str]] = {
    "bash": "Bash", "edit": "Edit", "write": "Write", "read": "Read",
    "Glob": "glob", "Grep": "grep", "TodoWrite": "todo_write",
}

# What lets one command line run more than the command it starts with: control operators
# (; & | and newlines), substitutions ($ and backquotes, <( >( ), redirections (< >), subshells
# and grouping. A prefix rule refuses any command holding one of them.
SHELL_META: Final = frozenset(";&|`$<>(){}\n\r\x00")

_NAME = re.compile(r"[A-Za-z_*][A-Za-z0-9_.:*-]*")


class RuleError(ValueError):
    """A rule that does not parse; the message says why in one line."""


def has_shell_meta(command: str) -> bool:
    return any(ch in SHELL_META for ch in command)


def literal_path(path: str) -> str:
    """A path pattern that matches exactly ``path`` (glob characters escaped)."""
    return re.sub(r"([*?\\])", r"\\\1", path)


def _normal_abs(path: str) -> bool:
    return path.startswith("/") and os.path.normpath(path) == path and not path.startswith("//")


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("/**", i) and (i + 3 == len(pattern) or pattern[i + 3] == "/"):
            # a trailing /** is everything inside (not the folder itself); /**/ is any depth
            out.append("(?:/[^/]+)+" if i + 3 == len(pattern) else "(?:/[^/]+)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))  # \* is a literal star
            i += 2
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


@dataclass(frozen=True)
class Rule:
    """One parsed rule. ``specifier`` is ``None`` for a whole-tool rule; for ``Bash`` it is the
    command (``prefix`` true for ``…:*``); for path tools it is an absolute pattern."""

    tool: str
    specifier: str | None = None
    prefix: bool = False

    def __str__(self) -> str:
        if self.specifier is None:
            return self.tool
        if self.tool in PATH_TOOLS:
            spec = "/" + self.specifier  # absolute paths are written //path
        else:
            spec = self.specifier + (":*" if self.prefix else "")
        return f"{self.tool}({spec})"

    def covers(self, tool_name: str) -> bool:
        covered = _COVERS.get(self.tool)
        if covered is not None:
            return tool_name in covered
        if "*" in self.tool:
            # a name glob (``mcp__github__*``): * matches any run of characters
            return re.fullmatch(".*".join(map(re.escape, self.tool.split("*"))), tool_name) is not None
        if self.tool.startswith("mcp__") and self.tool.count("__") == 1:
            return tool_name.startswith(self.tool + "__")  # ``mcp__server``: all its tools
        return tool_name == self.tool

    def matches(self, tool_name: str, subject: str | None = None) -> bool:
        """Whether a call of ``tool_name`` on ``subject`` (the command, or the resolved
        absolute path) falls under this rule."""
        if not self.covers(tool_name):
            return False
        if self.specifier is None:
            return True
        if subject is None:
            return False
        if self.tool == "Bash":
            if subject == self.specifier and not self.prefix:
                return True
            if not self.prefix or has_shell_meta(subject):
                return False
            rest = subject[len(self.specifier):]
            return subject.startswith(self.specifier) and (rest == "" or rest[0] in " \t")
        if not _normal_abs(subject):
            return False
        return _glob_regex(self.specifier).fullmatch(subject) is not None


def _path_pattern(spec: str, tool: str, base: str | None, home: str | None) -> str:
    if spec.startswith("//"):
        pattern = spec[1:]
    elif spec == "~" or spec.startswith("~/"):
        root = home if home is not None else os.path.expanduser("~")
        pattern = root.rstrip("/") + spec[1:]
    else:
        if base is None:
            raise RuleError(
                f'path "{spec}" in {tool}(…) is relative (write //{spec.lstrip("/")} for an absolute path)'
            )
        pattern = base.rstrip("/") + "/" + spec.removeprefix("./").lstrip("/")
    literal = re.split(r"[*?]", pattern, maxsplit=1)[0]
    if not literal.startswith("/") or "/../" in literal + "/" or "/./" in literal + "/":
        raise RuleError(f'path "{spec}" in {tool}(…) must be absolute and normalised')
    return pattern


def parse_rule(
    text: str, *, base: str | None = None, home: str | None = None, anchor: str | None = None
) -> Rule:
    """Parse one rule. ``base`` is the folder relative path patterns (``p``, ``./p``) start from
    (the workspace), ``anchor`` the one ``/p`` starts from (the settings file's folder; default
    ``base``); without them only ``//abs`` and ``~/`` paths parse. Tool names may be Claude
    Code's (``Bash``) or dsh's (``bash``)."""
    text = text.strip()
    name, paren, rest = text.partition("(")
    if not _NAME.fullmatch(name):
        raise RuleError(f'"{text}" is not a permission rule (expected Tool or Tool(specifier))')
    name = ALIASES.get(name, name)
    if not paren:
        return Rule(name)
    if not rest.endswith(")"):
        raise RuleError(f'"{text}" is missing its closing ")"')
    spec = rest[:-1]
    if name == "Bash":
        if spec in ("", "*", ":*"):
            return Rule(name)
        if spec.endswith(":*"):
            prefix = spec[:-2]
            if not prefix.strip() or "*" in prefix:
                raise RuleError(f'"{text}": a Bash prefix rule needs a command before ":*"')
            return Rule(name, prefix, prefix=True)
        if "*" in spec:
            raise RuleError(f'"{text}": only a trailing ":*" is supported in Bash rules')
        return Rule(name, spec)
    if name in PATH_TOOLS:
        if not spec:
            return Rule(name)
        if spec.startswith("/") and not spec.startswith("//") and anchor is not None:
            return Rule(name, _path_pattern("." + spec, name, anchor, home))
        return Rule(name, _path_pattern(spec, name, base, home))
    raise RuleError(f'"{text}": only Bash, Edit, Write and Read rules take a specifier')


def is_wildcard(rule: Rule) -> bool:
    """Whether ``rule`` names tools by a glob (``mcp__github__*``) or a server (``mcp__github``)."""
    return "*" in rule.tool or (rule.tool.startswith("mcp__") and rule.tool.count("__") == 1)
