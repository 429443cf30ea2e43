"""Project file kinds: the files of a project folder that can make dsh run something.

A kind names where its files live in a project folder (``locations``, relative glob patterns
such as ``.mcp.json`` or ``.claude/agents/*.md``) and how to list what a file would run
(``commands``: a pure function of the file's bytes, which never expands a variable or starts
anything). The module that reads a kind defines it and calls :func:`register_kind`; the trust
gate (:mod:`dsh.trust.gate`) and ``dsh trust`` only ever see kinds through this registry.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Command", "FileKind", "kinds", "register_kind"]


@dataclass(frozen=True)
class Command:
    """One thing a project file would make dsh run or reach, exactly as the file spells it.

    ``argv`` is a program and its arguments (``("npx", "-y", "server")``); ``url`` a remote
    endpoint it would connect to, with ``env``/``headers`` as written (``${VAR}`` unexpanded).
    """

    what: str
    argv: tuple[str, ...] = ()
    url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None

    def short(self) -> str:
        """The program and its arguments (or the URL), as a shell would read them."""
        if self.url is not None:
            return f"connect to {self.url}"
        return shlex.join(self.argv)

    def full(self) -> str:
        """Everything that shapes what runs: the label, environment, folder and command line."""
        parts = [f"{self.what}:"]
        if self.env:
            parts.append("env " + " ".join(shlex.quote(f"{k}={v}") for k, v in self.env.items()))
        parts.append(self.short())
        if self.headers:
            parts.append("with headers " + ", ".join(f"{k}: {v}" for k, v in self.headers.items()))
        if self.cwd is not None:
            parts.append(f"(in {self.cwd})")
        return " ".join(parts)


@dataclass(frozen=True)
class FileKind:
    """A kind of project file that needs the user's trust before dsh acts on it.

    ``commands(path, content)`` lists what the file would run; it raises
    :class:`dsh.runtime.config.ConfigError` for a file it cannot read (bad JSON ...).
    """

    name: str
    locations: tuple[str, ...]
    commands: Callable[[Path, bytes], list[Command]]


_KINDS: dict[str, FileKind] = {}


def register_kind(kind: FileKind) -> FileKind:
    """Add (or replace, by name) a project file kind; returns it for module-level use."""
    _KINDS[kind.name] = kind
    return kind


def kinds() -> list[FileKind]:
    """Every registered kind, in registration order."""
    return list(_KINDS.values())
