"""Finding skills: folders with a ``SKILL.md`` whose front matter names the skill.

Roots, nearest first (the first skill of a name wins; a later one of the same name is shadowed):

1. from the cwd up to the project root (the nearest ancestor holding ``.git``; the cwd without
   one), in each folder ``.dsh/skills``, ``.agents/skills``, ``.claude/skills``;
2. the dsh home's ``skills`` (``$DSH_HOME/skills``);
3. Claude Code's user skills, ``~/.claude/skills`` (``$CLAUDE_CONFIG_DIR/skills`` when set).

A skill is ``<root>/<folder>/SKILL.md`` starting with YAML front matter (``---`` lines) that has
``name`` (kebab-case, as Claude Code and the reference require) and ``description``. A folder
whose ``SKILL.md`` is unreadable, larger than 1 MiB, without front matter, or without a valid
``name``/``description`` is one warning line and is skipped.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from dsh._home import dsh_home
from dsh.plugins.agent_instructions import project_root
from dsh.settings import claude_user_folder

__all__ = ["MAX_SKILL_BYTES", "Skill", "discover", "read_skill", "split_front_matter"]

MAX_SKILL_BYTES = 1 << 20
NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
PROJECT_ROOTS = (".dsh/skills", ".agents/skills", ".claude/skills")


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path
    """The ``SKILL.md`` file."""
    source: str
    """Where it was found: ``project .claude/skills``, ``user ~/.claude/skills``, ``dsh home``..."""


def split_front_matter(text: str) -> tuple[str | None, str]:
    """``(front matter, body)``; ``None`` when the text does not start with a ``---`` block."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None, text
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            return "".join(lines[1:i]), "".join(lines[i + 1 :])
    return None, text


def read_skill(path: Path) -> str:
    """The text of ``SKILL.md`` (regular file, at most 1 MiB, opened without blocking)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        data = os.read(fd, MAX_SKILL_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SKILL_BYTES:
        raise ValueError(f"larger than {MAX_SKILL_BYTES >> 20} MiB")
    return data.decode("utf-8")


def _parse(path: Path, source: str) -> Skill:
    try:
        text = read_skill(path)
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except OSError as exc:
        raise ValueError(exc.strerror or str(exc)) from None
    front, _ = split_front_matter(text)
    if front is None:
        raise ValueError("no front matter (a --- block with name and description)")
    try:
        meta = yaml.safe_load(front)
    except yaml.YAMLError as exc:
        raise ValueError(f"front matter is not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(meta, Mapping):
        raise ValueError("front matter is not a mapping")
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError(f"name must be kebab-case (got {name!r})")
    if not isinstance(description, str) or not description.strip():
        raise ValueError("description is missing")
    return Skill(name, " ".join(description.split()), path, source)


def _roots(cwd: Path, environ: Mapping[str, str]) -> list[tuple[Path, str]]:
    cwd = Path(os.path.realpath(cwd))
    root = project_root(cwd)
    chain = [cwd, *cwd.parents]
    roots: list[tuple[Path, str]] = []
    for folder in chain[: chain.index(root) + 1]:
        for name in PROJECT_ROOTS:
            shown = os.path.relpath(folder / name, root) if folder != root else name
            roots.append((folder / name, f"project {shown}"))
    roots.append((dsh_home(environ) / "skills", "dsh home"))
    roots.append((claude_user_folder(environ) / "skills", "user ~/.claude/skills"))
    return roots


def discover(cwd: Path, environ: Mapping[str, str] | None = None) -> tuple[list[Skill], list[str]]:
    """The skills seen from ``cwd``, sorted by name, and one warning per skipped folder."""
    env = os.environ if environ is None else environ
    found: dict[str, Skill] = {}
    warnings: list[str] = []
    for root, source in _roots(cwd, env):
        try:
            folders = sorted(p for p in root.iterdir() if p.is_dir())
        except OSError:
            continue
        for folder in folders:
            path = folder / "SKILL.md"
            if not path.exists():
                continue
            try:
                skill = _parse(path, source)
            except ValueError as exc:
                warnings.append(f"skill {path}: {exc}; skipped")
                continue
            found.setdefault(skill.name, skill)
    return sorted(found.values(), key=lambda s: s.name), warnings
