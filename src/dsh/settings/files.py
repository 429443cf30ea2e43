"""The settings files dsh reads, where each lives, and reading them once, bounded and typed.

Files, in the order their sections apply (user files first, then the project's):

| scope | origin | file |
|---|---|---|
| user | dsh | ``$DSH_HOME/settings.json`` |
| user | claude | ``~/.claude/settings.json`` (``$CLAUDE_CONFIG_DIR/settings.json`` when set) |
| project | claude | ``.claude/settings.json``, ``.claude/settings.local.json`` |
| project | dsh | ``.dsh/settings.json``, ``.dsh/settings.local.json`` |

Every file is read once through the trust gate's bounded reader (:func:`dsh.trust.read_project_file`:
a regular file of at most 1 MiB, opened without blocking), parsed as one JSON object, and each
registered section (:mod:`dsh.settings.sections`) is decoded with msgspec into its own type. A
project file's sections take effect only once the user trusts that exact content
(:func:`dsh.trust.admit`); until then they are kept, marked untrusted, for listing only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dsh._home import dsh_home
from dsh.runtime.config import ConfigError
from dsh.settings.sections import decode_section, sections
from dsh.trust import (
    Command,
    FileKind,
    ProjectFile,
    TrustStore,
    admit,
    check,
    read_project_file,
    register_kind,
    trust_path,
)

__all__ = [
    "KIND",
    "PROJECT_FILES",
    "LoadedFile",
    "Origin",
    "Scope",
    "SectionValue",
    "Settings",
    "claude_user_folder",
    "load_settings",
    "parse_object",
]

Scope = Literal["user", "project"]
Origin = Literal["dsh", "claude"]

PROJECT_FILES: tuple[tuple[str, Origin], ...] = (
    (".claude/settings.json", "claude"),
    (".claude/settings.local.json", "claude"),
    (".dsh/settings.json", "dsh"),
    (".dsh/settings.local.json", "dsh"),
)


def claude_user_folder(environ: Mapping[str, str] | None = None) -> Path:
    """Claude Code's user folder: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    env = os.environ if environ is None else environ
    explicit = env.get("CLAUDE_CONFIG_DIR")
    return Path(explicit).expanduser() if explicit else Path.home() / ".claude"


def parse_object(path: Path, content: bytes) -> dict[str, Any]:
    """The file's top-level JSON object; ``ConfigError`` (one line) otherwise."""
    try:
        data = json.loads(content.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: line {exc.lineno}: invalid JSON ({exc.msg})") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data


def _commands(path: Path, content: bytes) -> list[Command]:
    """What a project settings file would run: every command of every section that runs any."""
    data = parse_object(path, content)
    found: list[Command] = []
    for section in sections():
        if section.commands is not None and section.key in data:
            found.extend(section.commands(decode_section(path, section, data[section.key])))
    return found


KIND = register_kind(FileKind("project-settings", tuple(name for name, _ in PROJECT_FILES), _commands))
"""Project settings files: each hook command they define (see :mod:`dsh.settings.sections`)."""


@dataclass(frozen=True)
class SectionValue:
    """One file's value of one section, with where it came from and whether it is in force."""

    file: Path
    scope: Scope
    origin: Origin
    trusted: bool
    value: Any


@dataclass(frozen=True)
class LoadedFile:
    path: Path
    scope: Scope
    origin: Origin
    trusted: bool
    sections: Mapping[str, Any]
    """Section key -> its decoded value (only the registered sections the file has)."""


@dataclass(frozen=True)
class Settings:
    """Every settings file found, in the order their sections apply."""

    files: tuple[LoadedFile, ...]

    def section(self, key: str, *, include_untrusted: bool = False) -> list[SectionValue]:
        """Each file's value of section ``key``, in order; untrusted files only when asked."""
        return [
            SectionValue(f.path, f.scope, f.origin, f.trusted, f.sections[key])
            for f in self.files
            if key in f.sections and (f.trusted or include_untrusted)
        ]


def _decode_all(path: Path, content: bytes) -> dict[str, Any]:
    data = parse_object(path, content)
    return {s.key: decode_section(path, s, data[s.key]) for s in sections() if s.key in data}


def _user_file(folder: Path, name: str, origin: Origin) -> LoadedFile | None:
    path = folder / name
    if not os.access(path.parent, os.X_OK):
        # A home this user cannot even look into (``$HOME`` of another user under sudo or
        # setpriv), or none at all, holds no file of theirs.
        return None
    file = read_project_file(folder, name, KIND)  # the same bounded, non-blocking read
    if file is None:
        return None
    return LoadedFile(file.path, "user", origin, True, _decode_all(file.path, file.content))


def load_settings(
    cwd: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    check_trust: bool = True,
) -> Settings:
    """Read the user's and the project's (``cwd``) settings files.

    A project file the user does not trust is loaded untrusted and, with ``check_trust``,
    gets the trust gate's one line on stderr (once per content per run). A file that cannot be
    read or parsed is a :class:`ConfigError` naming it.
    """
    env = os.environ if environ is None else environ
    found: list[LoadedFile] = []
    for folder, name, origin in (
        (dsh_home(env), "settings.json", "dsh"),
        (claude_user_folder(env), "settings.json", "claude"),
    ):
        loaded = _user_file(folder, name, origin)  # type: ignore[arg-type]
        if loaded is not None:
            found.append(loaded)
    base = cwd if cwd is not None else Path.cwd()
    store = TrustStore(trust_path(env))
    for name, origin in PROJECT_FILES:
        project: ProjectFile | None = read_project_file(base, name, KIND)
        if project is None:
            continue
        # An empty section (``"hooks": {}``) grants nothing either.
        decoded = {key: value for key, value in _decode_all(project.path, project.content).items() if value}
        if not decoded:
            continue  # none of the sections dsh reads: the file changes nothing here
        # Every section of a project file grants something (hooks run, permissions allow), so
        # each needs the user's trust in this exact content, even one that lists no command.
        trusted = admit(project, store) if check_trust else check(project, store)[0] == "trusted"
        found.append(LoadedFile(project.path, "project", origin, trusted, decoded))
    return Settings(tuple(found))
