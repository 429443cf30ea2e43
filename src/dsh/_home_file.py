"""The user's small JSON files in the dsh home (trust records, project permission rules): one
writer at a time, and no reader ever sees half a file.

Why one module: both files decide what dsh may run, so both need the same care. The lock is a
separate ``.<name>.lock`` file (opened without following links) so that the atomic rename of the
data file never races the lock; the data is written to a 0600 temp file in the same folder,
fsynced, renamed over the old one, and the folder fsynced, so a crash leaves the old file or the
new one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["locked", "write_private"]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (its folder is made 0700 when missing)."""
    folder = path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / f".{path.name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically, mode 0600 (call it under :func:`locked`)."""
    folder = path.parent
    fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
