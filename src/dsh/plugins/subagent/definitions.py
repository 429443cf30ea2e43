"""Agent definition files: Markdown with YAML front matter (``name``, ``description``, ``tools``,
``model``) whose body is the child's system prompt, as Claude Code's ``.claude/agents/*.md``.

Owns parsing (:func:`parse`), discovery (:func:`discover`) and the project file kind
``agent-definitions``. The user's own files (``agents/`` in the dsh home, ``~/.claude/agents/``)
are read as they are; the project's (``.claude/agents/*.md``, ``.dsh/agents/*.md``) change what
runs (a prompt and a tool set), so they are read through the trust gate and used only once the
user has trusted that exact content in that folder. A project definition wins over a user one
of the same name, as in Claude Code.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dsh._home import dsh_home
from dsh.runtime.config import ConfigError
from dsh.trust import Command, FileKind, admit, project_files, register_kind

__all__ = ["KIND", "AgentDefinition", "discover", "parse"]

log = logging.getLogger("dsh.subagent")

PROJECT_LOCATIONS = (".claude/agents/*.md", ".dsh/agents/*.md")
_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class AgentDefinition:
    """One delegation target: its name and description (listed in the tool's description), the
    tools it may use (``None``: every tool), its model (``None`` or ``inherit``: the parent's)
    and its system prompt."""

    name: str
    description: str
    prompt: str
    tools: tuple[str, ...] | None = None
    model: str | None = None
    path: str | None = None
    # Library targets (``dsh.Agent(subagents=...)``, ``agent.as_tool``): tools the child alone
    # sees (registered for its agent id), which are then its whole tool set.
    own_tools: tuple[Any, ...] = ()


def _tools(value: object, path: Path) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ConfigError(f"{path}: tools must be a list of tool names or a comma-separated string")
    # Claude Code spells tools Read, Grep, Bash: dsh's names are the lower-case ones.
    return tuple(dict.fromkeys(i.strip().lower() for i in items if i.strip()))


def parse(path: Path, content: bytes) -> AgentDefinition:
    """The definition in ``content`` (the file's bytes); ``ConfigError`` naming ``path``."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    match = _FRONT.match(text)
    if match is None:
        raise ConfigError(f"{path}: no YAML front matter (a --- line, name and description, a --- line)")
    try:
        meta = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML front matter ({str(exc).splitlines()[0]})") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{path}: the front matter must be a mapping")
    name = meta.get("name", path.stem)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{path}: name must be letters, digits, '.', '_' or '-' (at most 64)")
    description = meta.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{path}: description must be text")
    model = meta.get("model")
    if model is not None and not isinstance(model, str):
        raise ConfigError(f"{path}: model must be a model name")
    if model in ("", "inherit"):
        model = None
    body = text[match.end():].strip()
    return AgentDefinition(name, " ".join(description.split()), body, _tools(meta.get("tools"), path), model, str(path))


def _commands(path: Path, content: bytes) -> list[Command]:
    """What a definition makes dsh run: a child with this prompt, model and tools."""
    found = parse(path, content)
    tools = ",".join(found.tools) if found.tools is not None else "all"
    return [Command(f'subagent "{found.name}"', argv=(f"tools={tools}", f"model={found.model or 'inherit'}"))]


KIND = register_kind(FileKind("agent-definitions", PROJECT_LOCATIONS, _commands))


def _user_folders(home: Path | None) -> list[Path]:
    return [Path.home() / ".claude" / "agents", (home or dsh_home()) / "agents"]


def _read_user(folder: Path) -> list[AgentDefinition]:
    found = []
    try:
        paths = sorted(folder.glob("*.md")) if folder.is_dir() else []
    except OSError as exc:  # a home this user may not read (HOME=/root under setpriv): none
        log.debug("%s: cannot list agent definitions: %s", folder, exc)
        paths = []
    for path in paths:
        try:
            found.append(parse(path, path.read_bytes()))
        except (ConfigError, OSError) as exc:
            log.warning("%s", exc if isinstance(exc, ConfigError) else f"{path}: cannot read: {exc}")
    return found


def discover(cwd: Path, *, home: Path | None = None, project: bool = True) -> list[AgentDefinition]:
    """The definitions a session in ``cwd`` may delegate to, by name (project over user).

    An unreadable file is one warning line and is skipped; an untrusted project file is the
    trust gate's one line and is skipped.
    """
    by_name: dict[str, AgentDefinition] = {}
    for folder in _user_folders(home):
        for found in _read_user(folder):
            by_name[found.name] = found
    if project:
        try:
            files = project_files(cwd, [KIND])
        except (ConfigError, OSError) as exc:
            log.warning("%s", exc)
            files = []
        for file in files:
            try:
                found = parse(file.path, file.content)
            except ConfigError as exc:
                log.warning("%s", exc)
                continue
            if admit(file):
                by_name[found.name] = found
    return [by_name[n] for n in sorted(by_name)]
