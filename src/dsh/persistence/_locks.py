"""One writer per session: per-id lock files held with ``flock``.

Owns :class:`WriterLock` and :func:`acquire`. A lock is ``flock(LOCK_EX | LOCK_NB)`` on
``<lock dir>/<encoded id>.lock`` (mode 0600, directory 0700). ``flock`` locks belong to an open
file description, so they exclude a second process *and* a second store object in the same
process (each opens the file itself), and the kernel drops them when the holder dies, even by
``kill -9``: no stale-lock cleanup is ever needed.

Lock files are unlinked on release so they do not accumulate. That is safe because a locker
re-checks, after ``flock`` succeeds, that the path still names the inode it locked; if not (the
holder released and unlinked in between) it retries on the new file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os

from dsh.persistence._paths import encode_session_id, ensure_private_dir
from dsh.persistence.base import SessionLocked


class WriterLock:
    """A held writer lock; :meth:`release` is idempotent."""

    __slots__ = ("_fd", "path", "session_id")

    def __init__(self, session_id: str, path: str, fd: int) -> None:
        self.session_id = session_id
        self.path = path
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            # Unlock explicitly: a forked child may share this open file description.
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __repr__(self) -> str:
        state = "held" if self.held else "released"
        return f"WriterLock({self.session_id!r}, {state})"


def lock_path(lock_dir: str, session_id: str) -> str:
    return os.path.join(lock_dir, encode_session_id(session_id) + ".lock")


def acquire(lock_dir: str, session_id: str) -> WriterLock:
    """Take the writer lock of ``session_id`` or raise :class:`SessionLocked` at once."""
    path = lock_path(lock_dir, session_id)
    ensure_private_dir(lock_dir)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise SessionLocked(session_id) from None
                raise
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
            mine = os.fstat(fd)
            if current is None or (current.st_dev, current.st_ino) != (mine.st_dev, mine.st_ino):
                # The previous holder unlinked this file while we were locking it: retry.
                os.close(fd)
                continue
            if mine.st_mode & 0o777 != 0o600:
                os.fchmod(fd, 0o600)
            return WriterLock(session_id, path, fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
