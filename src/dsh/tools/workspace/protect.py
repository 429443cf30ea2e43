"""Paths inside a writable workspace that stay read-only: the repository's git metadata.

Why: a hook in ``.git/hooks`` or a ``core.fsmonitor`` line in ``.git/config`` runs unconfined the
next time the *user* runs git, so a confined command that could write there could escape the
sandbox a little later. Both confined modes bind these read-only for ``bash``, and ``write`` /
``edit`` ask for approval before touching them (one list, so the two can never disagree).

What is protected, for a workspace ``W``:

- ``W/.git`` when it is a folder;
- when ``W/.git`` is a *file* (a worktree or submodule: ``gitdir: <path>``), the file itself, the
  folder it points to, and that folder's ``commondir`` (the main repository's git folder, which
  holds the shared ``hooks`` and ``config``).

A workspace without ``.git`` protects nothing here: a repository the command creates itself is
its own. Every path is returned resolved through symlinks, and only when it exists.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["is_protected", "protected_paths"]

# A gitdir file is a line or two; anything much larger is not one.
_MAX_POINTER_BYTES: Final = 4096


def _pointer_target(pointer: Path) -> Path | None:
    """The folder a ``gitdir: <path>`` file names (relative to the file), or ``None``."""
    try:
        with open(pointer, "rb") as fh:
            raw = fh.read(_MAX_POINTER_BYTES)
    except OSError:
        return None
    first = raw.decode("utf-8", "replace").splitlines()[:1]
    if not first or not first[0].startswith("gitdir:"):
        return None
    target = Path(first[0][len("gitdir:") :].strip())
    if not target.is_absolute():
        target = pointer.parent / target
    return target


def _common_dir(git_dir: Path) -> Path | None:
    """The shared git folder a linked worktree's ``commondir`` file names, or ``None``."""
    try:
        with open(git_dir / "commondir", "rb") as fh:
            value = fh.read(_MAX_POINTER_BYTES).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not value:
        return None
    common = Path(value)
    return common if common.is_absolute() else git_dir / common


def protected_paths(workspace: Path) -> tuple[Path, ...]:
    """The existing, resolved paths under (or reached from) ``workspace`` that stay read-only."""
    dot_git = workspace / ".git"
    found: list[Path] = []
    if dot_git.is_symlink() or dot_git.is_dir():
        found.append(dot_git)
    elif dot_git.is_file():
        found.append(dot_git)
        target = _pointer_target(dot_git)
        if target is not None and target.is_dir():
            found.append(target)
            common = _common_dir(target)
            if common is not None and common.is_dir():
                found.append(common)
    out: list[Path] = []
    for path in found:
        real = Path(os.path.realpath(path))
        if real.exists() and real not in out:
            out.append(real)
    return tuple(out)


def is_protected(path: Path, workspace: Path) -> bool:
    """Whether the resolved ``path`` is one of :func:`protected_paths` or lies below one."""
    return any(path == root or root in path.parents for root in protected_paths(workspace))
