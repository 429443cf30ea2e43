"""The trust file: which project files the user trusts, in the user's dsh home.

``<dsh home>/trust.json`` (``$DSH_HOME``, see :func:`dsh._home.dsh_home`), never in a project:

```json
{"version": 1, "files": [
  {"path": "/home/me/p/.mcp.json", "folder": "/home/me/p", "kind": "mcp-servers",
   "sha256": "9f2c...", "trustedAt": "2026-12-01T20:15:00Z"}
]}
```

A record trusts one exact content (``sha256`` of the file's bytes) of one file (``path``, its
real path with every symlink resolved) used from one project folder (``folder``, resolved too:
the folder its commands run in). The file is written atomically (a temporary file in the same
folder, fsync, rename, fsync of the folder) with mode 0600 under an advisory lock, so two
``dsh trust`` never lose each other's records. A trust file that is not a regular file owned by
the user, is writable by group or others, or does not parse, trusts nothing (fail closed):
:class:`TrustFileError` says why.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

import msgspec

from dsh._home import dsh_home
from dsh._home_file import locked, write_private

__all__ = ["FILE_NAME", "Record", "TrustFileError", "TrustStore", "trust_path"]

FILE_NAME = "trust.json"
MAX_BYTES = 8 << 20


class TrustFileError(Exception):
    """The trust file cannot be used; the message names it and the cause."""


class Record(msgspec.Struct, rename="camel", frozen=True):
    path: str
    folder: str
    kind: str
    sha256: str
    trusted_at: str


class _File(msgspec.Struct):
    version: int = 1
    files: list[Record] = msgspec.field(default_factory=list)


def trust_path(environ: Mapping[str, str] | None = None) -> Path:
    """``<dsh home>/trust.json``."""
    return dsh_home(environ) / FILE_NAME


class TrustStore:
    """Reads and rewrites one trust file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else trust_path()

    def records(self) -> list[Record]:
        """Every record; ``[]`` when there is no trust file yet."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise TrustFileError(f"cannot read the trust file {self.path}: {exc.strerror or exc}") from None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise TrustFileError(f"the trust file {self.path} is not a regular file")
            if info.st_uid != os.geteuid() or info.st_mode & 0o022:
                raise TrustFileError(
                    f"the trust file {self.path} is writable by another user; "
                    "dsh trusts no project file until it is yours alone (chmod 600)"
                )
            data = handle.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise TrustFileError(f"the trust file {self.path} is larger than {MAX_BYTES >> 20} MiB")
        try:
            return msgspec.json.decode(data, type=_File).files
        except msgspec.DecodeError as exc:
            raise TrustFileError(f"the trust file {self.path} is not valid ({exc}); remove it to start over") from None

    def update(self, change: Callable[[list[Record]], list[Record]]) -> list[Record]:
        """Rewrite the file with ``change(records)`` under the lock; returns the new records."""
        with self._locked():
            records = change(self.records())
            self._write(records)
            return records

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return locked(self.path)

    def _write(self, records: list[Record]) -> None:
        write_private(self.path, msgspec.json.format(msgspec.json.encode(_File(files=records)), indent=2) + b"\n")
