"""The trust gate: reading a project file once, and deciding whether dsh may act on it.

A project file is read once, as bytes, through :func:`read_project_file`: opened without
blocking (a FIFO cannot hang dsh), only if it is a regular file of at most 1 MiB, and named by
the real path of the opened descriptor (``/proc/self/fd``), so a symlink is judged by what it
points to at the moment it is read. Its hash and its parsing use those same bytes: a file
swapped after the check is never what runs.

:func:`admit` is what every reader of a project file calls before acting on it: ``True`` when
the user trusts this exact content of this file in this folder; otherwise it logs the one line
(:func:`untrusted_line`) and returns ``False``, and the caller starts nothing of the file, does
not expand its variables, and honours none of its grants. A file the user declined at the
terminal for this run (:func:`decline`) is skipped without a second line.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dsh.apps.escape import escape_controls
from dsh.runtime.config import ConfigError
from dsh.trust.kinds import Command, FileKind, kinds
from dsh.trust.store import Record, TrustFileError, TrustStore

__all__ = [
    "ProjectFile",
    "Status",
    "admit",
    "check",
    "decline",
    "project_files",
    "read_project_file",
    "revoke",
    "trust",
    "untrusted_line",
]

log = logging.getLogger("dsh.trust")

MAX_FILE_BYTES = 1 << 20
MAX_LINE_CHARS = 2000

Status = Literal["trusted", "new", "changed", "unusable"]


@dataclass(frozen=True)
class ProjectFile:
    """One project file as read: where it was found, what it really is, and its bytes."""

    kind: FileKind
    path: Path
    """Where it was found (the project folder, resolved, joined with the relative name)."""
    real: Path
    """The real path of the opened file (symlinks resolved)."""
    folder: Path
    """The project folder, resolved: where its commands would run."""
    content: bytes
    sha256: str

    def commands(self) -> list[Command]:
        return self.kind.commands(self.path, self.content)


def _real_path(fd: int, fallback: Path) -> Path:
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return Path(os.path.realpath(fallback))


def read_project_file(folder: Path, relative: str, kind: FileKind) -> ProjectFile | None:
    """The file ``relative`` of ``folder`` (``None`` when there is none); ``ConfigError`` when
    it exists but is not a readable regular file of at most 1 MiB."""
    base = folder.resolve()
    path = base / relative
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path}: not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB")
        real = _real_path(fd, path)
        chunks, size = [], 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    content = b"".join(chunks)
    if len(content) > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB")
    return ProjectFile(kind, path, real, base, content, hashlib.sha256(content).hexdigest())


def project_files(folder: Path, only: Iterable[FileKind] | None = None) -> list[ProjectFile]:
    """Every project file of ``folder`` of the registered kinds (or of ``only``)."""
    found: list[ProjectFile] = []
    base = folder.resolve()
    for kind in kinds() if only is None else only:
        for pattern in kind.locations:
            names = [pattern] if not any(c in pattern for c in "*?[") else sorted(
                str(p.relative_to(base)) for p in base.glob(pattern)
            )
            for name in names:
                file = read_project_file(base, name, kind)
                if file is not None:
                    found.append(file)
    return found


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(os.path.realpath(path)).relative_to(folder)
    except ValueError:
        return False
    return True


def check(file: ProjectFile, store: TrustStore | None = None) -> tuple[Status, str]:
    """``(status, why)``: ``trusted``, ``new``, ``changed``, or ``unusable`` (the trust file
    cannot be used, or lies inside the project, where the project could write it)."""
    store = store or TrustStore()
    if _inside(store.path, file.folder):
        return "unusable", f"the trust file {store.path} is inside this project, where the project can write it"
    try:
        records = store.records()
    except TrustFileError as exc:
        return "unusable", str(exc)
    mine = [r for r in records if r.path == str(file.real) and r.folder == str(file.folder)]
    if any(r.sha256 == file.sha256 and r.kind == file.kind.name for r in mine):
        return "trusted", "trusted"
    return ("changed", "changed") if mine else ("new", "new")


def untrusted_line(file: ProjectFile, why: str, commands: Sequence[Command] | None = None) -> str:
    """The one line an untrusted file gets (without the ``dsh:`` prefix the log adds)."""
    listed = [c.short() for c in (file.commands() if commands is None else commands)]
    would = ", ".join(listed) if listed else "nothing"
    if len(would) > MAX_LINE_CHARS:
        would = would[:MAX_LINE_CHARS] + "... (dsh trust shows all)"
    line = (
        f"{file.path} is not trusted ({why}); it would run: {would}; "
        f"review and trust it with: dsh trust (in {file.folder})"
    )
    return escape_controls(line.replace("\n", "\\n"))


_DECLINED: set[tuple[str, str, str]] = set()


def decline(file: ProjectFile) -> None:
    """The user said no at the terminal: skip this content of this file for this run, quietly."""
    _DECLINED.add((str(file.real), str(file.folder), file.sha256))


def admit(file: ProjectFile, store: TrustStore | None = None) -> bool:
    """Whether dsh may act on ``file``; when not, the one line is logged (see the module doc)."""
    status, why = check(file, store)
    if status == "trusted":
        return True
    if (str(file.real), str(file.folder), file.sha256) not in _DECLINED:
        log.warning("%s", untrusted_line(file, why))
    return False


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def trust(files: Sequence[ProjectFile], store: TrustStore | None = None) -> None:
    """Record the user's trust in exactly these contents of these files (replacing older ones)."""
    store = store or TrustStore()
    for file in files:
        if _inside(store.path, file.folder):
            raise TrustFileError(
                f"the trust file {store.path} is inside the project {file.folder}, where the project "
                "can write it; set DSH_HOME to a folder outside the project"
            )
    keys = {(str(f.real), str(f.folder)) for f in files}
    added = [Record(str(f.real), str(f.folder), f.kind.name, f.sha256, _now()) for f in files]

    def change(records: list[Record]) -> list[Record]:
        return [r for r in records if (r.path, r.folder) not in keys] + added

    store.update(change)


def revoke(target: Path | None, folder: Path, store: TrustStore | None = None) -> list[Record]:
    """Drop the records of file ``target`` (its real path, or where it is found), or, without
    a target, every record of ``folder``; returns the dropped records."""
    store = store or TrustStore()
    base = folder.resolve()
    wanted: set[str] = set()
    if target is not None:
        absolute = target if target.is_absolute() else base / target
        wanted = {str(absolute), os.path.realpath(absolute)}
    dropped: list[Record] = []

    def change(records: list[Record]) -> list[Record]:
        kept: list[Record] = []
        for record in records:
            hit = record.path in wanted if target is not None else record.folder == str(base)
            (dropped if hit else kept).append(record)
        return kept

    store.update(change)
    return dropped
