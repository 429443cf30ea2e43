""""Always allow in this project": allow rules the user granted for one project folder, kept in
the user's dsh home (never in the repository, where the project or the model could write them).

``<dsh home>/permissions.json``, mode 0600, rewritten atomically (temporary file in the same
folder, fsync, rename) under ``flock`` on ``.permissions.json.lock``:

```json
{"version": 1, "projects": {"/home/me/p": {"allow": ["Bash(npm test:*)", "mcp__calc__add"]}}}
```

Fails closed: a file that is not a regular file owned by the user, is writable by group or
others, or does not parse, grants nothing (:class:`ProjectRulesError` says why).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

import msgspec

from dsh._home import dsh_home
from dsh._home_file import locked, write_private

__all__ = ["FILE_NAME", "ProjectRules", "ProjectRulesError", "source_of"]

FILE_NAME = "permissions.json"
MAX_BYTES = 1 << 20


class ProjectRulesError(Exception):
    """The project permissions file cannot be used; the message names it and the cause."""


class _Project(msgspec.Struct):
    allow: list[str] = msgspec.field(default_factory=list)


class _File(msgspec.Struct):
    version: int = 1
    projects: dict[str, _Project] = msgspec.field(default_factory=dict)


def source_of(path: Path) -> str:
    """How a rule of this file is named as a source."""
    return f"always allow in this project ({path})"


class ProjectRules:
    """Reads and rewrites ``<dsh home>/permissions.json``."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else dsh_home() / FILE_NAME

    def _read(self) -> _File:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return _File()
        except OSError as exc:
            raise ProjectRulesError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ProjectRulesError(f"{self.path} is not a regular file")
            if info.st_uid != os.geteuid() or info.st_mode & 0o022:
                raise ProjectRulesError(f"{self.path} is writable by another user; it grants nothing (chmod 600)")
            data = handle.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise ProjectRulesError(f"{self.path} is larger than 1 MiB")
        try:
            return msgspec.json.decode(data, type=_File)
        except msgspec.DecodeError as exc:
            raise ProjectRulesError(f"{self.path} is not valid ({exc}); remove it to start over") from None

    def rules(self, folder: str) -> list[str]:
        """The allow rules of project ``folder`` (a resolved path)."""
        project = self._read().projects.get(folder)
        return list(project.allow) if project is not None else []

    def add(self, folder: str, rule: str) -> None:
        def change(data: _File) -> None:
            project = data.projects.setdefault(folder, _Project())
            if rule not in project.allow:
                project.allow.append(rule)

        self._update(change)

    def remove(self, folder: str, rule: str) -> bool:
        """Forget ``rule`` of ``folder``; whether it was there."""
        found = False

        def change(data: _File) -> None:
            nonlocal found
            project = data.projects.get(folder)
            if project is not None and rule in project.allow:
                found = True
                project.allow.remove(rule)
                if not project.allow:
                    del data.projects[folder]

        self._update(change)
        return found

    def _update(self, change: Callable[[_File], None]) -> None:
        with self._locked():
            data = self._read()
            change(data)
            self._write(data)

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return locked(self.path)

    def _write(self, data: _File) -> None:
        write_private(self.path, msgspec.json.format(msgspec.json.encode(data), indent=2) + b"\n")
