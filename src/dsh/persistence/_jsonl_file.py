"""One JSONL session log as its writer holds it: the file's durable writes and the check that
nobody else wrote to it.

Owns :class:`OpenLog` (used by :mod:`dsh.persistence.jsonl`): the first write publishes the
whole file at once (temp file, fsync, hard link that refuses to overwrite, directory fsync);
later writes are ``O_APPEND`` writes followed by fsync, cut back to the previous size when they
fail; before each, :meth:`OpenLog.check_unchanged` refuses a file another program changed.
:func:`reopen` is the load side: cut a torn tail, append crash closers, durably.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

from dsh.persistence._local import LocalTracked
from dsh.persistence._locks import WriterLock
from dsh.persistence._paths import (
    ensure_private_dir,
    fsync_dir,
    remove_stale_temps,
    unlink_quietly,
    write_all,
)
from dsh.persistence.base import SessionExists, SessionModified, StoreError
from dsh.session.vocab import JsonObject

TAIL_BYTES = 256
"""How many of its last bytes a writer reads back before each append (see ``check_unchanged``)."""


@dataclass(kw_only=True)
class OpenLog(LocalTracked):
    """A session this store writes: its file and how much of it is durable."""

    header_line: bytes
    path: str
    size: int = 0
    fd: int | None = None  # None until materialised
    identity: tuple[int, int] = (0, 0)
    """``(st_dev, st_ino)`` of the file this writer appends to."""
    tail: bytes = b""
    """The last bytes this writer wrote (or found) at the end of the file."""

    def write(self, payload: bytes, *, sync: bool) -> None:
        """Write newline-ended event lines: the first write publishes the file."""
        if self.fd is None:
            self._publish(payload)
        else:
            self.check_unchanged()
            self._append(payload, sync=sync)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)

    def check_unchanged(self) -> None:
        """Refuse to append unless the file is exactly as this writer left it.

        The writer lock only keeps other dsh processes out; another program (the reference
        harness resuming the same session, an editor) can still write. Appending after it would
        leave a log neither can load, so the session stops being written and the file is left
        alone. Checked: the path still names our inode, its size is the size we left, and its
        last bytes are the ones we wrote (one ``fstat``, one ``stat``, one small ``pread``).
        """
        assert self.fd is not None
        try:
            here = os.fstat(self.fd)
            there = os.stat(self.path)
            same = (
                here.st_size == self.size
                and (here.st_dev, here.st_ino) == self.identity
                and (there.st_dev, there.st_ino) == self.identity
                and os.pread(self.fd, len(self.tail), self.size - len(self.tail)) == self.tail
            )
        except FileNotFoundError:
            same = False
        if not same:
            self.broken = SessionModified(str(self.header["id"]))
            raise self.broken

    def _publish(self, payload: bytes) -> None:
        directory = os.path.dirname(self.path)
        ensure_private_dir(directory)
        remove_stale_temps(self.path)
        temp = f"{self.path}.{secrets.token_hex(6)}.tmp"
        data = self.header_line + b"\n" + payload
        # Read-write: the foreign-writer check reads back the last bytes written.
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        published = False
        try:
            os.fchmod(fd, 0o600)
            write_all(fd, data)
            os.fsync(fd)
            try:
                os.link(temp, self.path)
            except FileExistsError:
                raise SessionExists.persisted(str(self.header["id"])) from None
            published = True
            fsync_dir(directory)
        except BaseException:
            os.close(fd)
            if published:
                unlink_quietly(self.path)
            unlink_quietly(temp)
            raise
        unlink_quietly(temp)
        self.fd = fd  # O_APPEND on the published inode: later appends go through it
        self.size = len(data)
        stat = os.fstat(fd)
        self.identity = (stat.st_dev, stat.st_ino)
        self.tail = data[-TAIL_BYTES:]

    def _append(self, payload: bytes, *, sync: bool) -> None:
        assert self.fd is not None
        before = self.size
        try:
            write_all(self.fd, payload)
            if sync:  # a later fsync of this file covers a checkpoint's bytes too
                os.fsync(self.fd)
        except BaseException:
            try:
                os.ftruncate(self.fd, before)
                os.fsync(self.fd)
            except OSError as exc:
                self.broken = StoreError(
                    f"session log {self.path} is in an unknown state after a failed append "
                    f"({exc}); load it again"
                )
            raise
        self.size = before + len(payload)
        self.tail = (
            payload[-TAIL_BYTES:]
            if len(payload) >= TAIL_BYTES
            else (self.tail + payload)[-TAIL_BYTES:]
        )


def reopen(
    path: str,
    *,
    header: JsonObject,
    header_line: bytes,
    lock: WriterLock,
    count: int,
    kept_end: int,
    torn: bool,
    closers: bytes,
) -> OpenLog:
    """Open a loaded log for appending: cut it back to ``kept_end`` when its tail is ``torn``
    and append ``closers`` (crash-repair lines), durably; the entry that tracks the result."""
    remove_stale_temps(path)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
    try:
        size = kept_end
        if torn:
            os.ftruncate(fd, size)
            os.fsync(fd)
        if closers:
            try:
                write_all(fd, closers)
                os.fsync(fd)
            except BaseException:
                os.ftruncate(fd, size)
                raise
            size += len(closers)
        stat = os.fstat(fd)
        tail = os.pread(fd, min(size, TAIL_BYTES), max(0, size - TAIL_BYTES))
    except BaseException:
        os.close(fd)
        raise
    return OpenLog(
        header=header,
        header_line=header_line,
        path=path,
        lock=lock,
        count=count,
        size=size,
        fd=fd,
        identity=(stat.st_dev, stat.st_ino),
        tail=tail,
    )
