"""Putting files back: the plan (what to change, what a user edit blocks) and applying it.

Owns the restore rule. Given the target tree (the workspace before the turn), the latest tree
dsh recorded (what the agent left), the tree of the workspace now, and the paths the agent
changed since the target:

- a path already as in the target is left alone (so a rerun after a crash finishes the job);
- a path as the agent left it is restored: contents, executable bit, symlink, or removed when
  the target has no such file (new files go; folders left empty by that go too);
- anything else was changed by someone after the agent: a conflict, refused without ``force``.

Applying writes each file to a temporary name in its own folder and renames it over the path
(``os.replace``), so every file is either old or new, never torn; temporary names are
deterministic (``.dsh-rewind-<hash>.tmp``), so a rerun cleans up what a killed run left.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dsh.rewind.store import Entry, ShadowStore

__all__ = ["Conflict", "Plan", "apply_plan", "make_plan"]


class Conflict(Exception):
    """Files changed after the agent; ``paths`` names them."""

    def __init__(self, paths: list[str]) -> None:
        shown = ", ".join(paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")
        super().__init__(
            f"not restoring: changed after the agent: {shown} (rerun with --force to overwrite)"
        )
        self.paths = paths


@dataclass
class Plan:
    writes: dict[str, Entry] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    forced: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return sorted([*self.writes, *self.deletes])


def make_plan(
    target: Mapping[str, Entry],
    latest: Mapping[str, Entry],
    now: Mapping[str, Entry],
    touched: set[str],
    *,
    force: bool,
) -> Plan:
    plan = Plan()
    conflicts: list[str] = []
    for path in sorted(touched):
        want, left, cur = target.get(path), latest.get(path), now.get(path)
        if cur == want:
            continue
        if cur != left:
            if not force:
                conflicts.append(path)
                continue
            plan.forced.append(path)
        if want is None:
            plan.deletes.append(path)
        elif want.mode != "160000":  # a nested repository's commit: not ours to check out
            plan.writes[path] = want
    if conflicts:
        raise Conflict(conflicts)
    return plan


def _temp(path: Path) -> Path:
    digest = hashlib.sha256(os.fsencode(path.name)).hexdigest()[:16]
    return path.parent / f".dsh-rewind-{digest}.tmp"


def _inside(root: Path, rel: str) -> Path:
    path = root / rel
    parts = Path(rel).parts
    if not parts or ".." in parts or Path(rel).is_absolute():
        raise ValueError(f"refusing path outside the workspace: {rel}")
    return path


def _remove(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        os.rmdir(path)  # only an empty one: its files are in the plan or not the agent's
    else:
        os.unlink(path)


def _prune_dirs(root: Path, rel: str, keep: set[str]) -> None:
    parent = Path(rel).parent
    while parent != Path("."):
        if str(parent) in keep:
            return
        try:
            os.rmdir(root / parent)
        except OSError:
            return  # not empty (or gone): stop climbing
        parent = parent.parent


def _real_parents(root: Path, rel: str) -> None:
    """Refuse when a folder on the way is (now) a symlink or not a folder: never act through it."""
    current = root
    for part in Path(rel).parent.parts:
        current = current / part
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                raise Conflict([str(current.relative_to(root))])
        except FileNotFoundError:
            return


def _ensure_parent(root: Path, rel: str) -> None:
    parent = Path(rel).parent
    current = root
    for part in parent.parts:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            os.mkdir(current, 0o777)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise Conflict([str(current.relative_to(root))])


def _write(path: Path, entry: Entry, data: bytes) -> None:
    temp = _temp(path)
    _remove_temp(temp)
    if entry.mode == "120000":
        os.symlink(os.fsdecode(data), temp)
    else:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        try:
            _write_all(fd, data)
            umask = os.umask(0)
            os.umask(umask)
            try:
                old = os.lstat(path).st_mode
                base = stat.S_IMODE(old) & ~0o111 if stat.S_ISREG(old) else 0o666 & ~umask
            except FileNotFoundError:
                base = 0o666 & ~umask
            execute = (base & 0o444) >> 2 if entry.mode == "100755" else 0
            os.fchmod(fd, base | execute)
            os.fsync(fd)
        finally:
            os.close(fd)
    try:
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            os.rmdir(path)
    except FileNotFoundError:
        pass
    os.replace(temp, path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _remove_temp(temp: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)


def apply_plan(store: ShadowStore, plan: Plan, target: Mapping[str, Entry]) -> None:
    """Carry out ``plan`` in ``store.workspace`` (deletions first, then writes)."""
    root = store.workspace
    keep = {str(p) for path in target for p in Path(path).parents}
    for rel in sorted(plan.deletes, key=lambda p: -len(Path(p).parts)):
        path = _inside(root, rel)
        _real_parents(root, rel)
        _remove(path)
        _prune_dirs(root, rel, keep)
    contents = store.blobs([entry.oid for entry in plan.writes.values()])
    touched_dirs: set[Path] = set()
    for rel, entry in sorted(plan.writes.items()):
        path = _inside(root, rel)
        _ensure_parent(root, rel)
        _write(path, entry, contents[entry.oid])
        touched_dirs.add(path.parent)
    for folder in touched_dirs:
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
