"""One JSONL session log as its writer holds it: the file's durable writes and the check that
nobody else wrote to it.

Owns :class:`OpenLog` (used by :mod:`dsh.persistence.jsonl`): the first write publishes the
whole file at once (temp file, fsync, hard link that refuses to overwrite, directory fsync);
later writes are ``O_APPEND`` writes followed by fsync, cut back to the previous size when they
fail; before each, :meth:`OpenLog.check_unchanged` refuses a file another program changed.
:func:`reopen` is the load side: cut a torn tail, append crash closers, durably.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass, field

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

BACK_STEP = 64 * 1024
"""How far back each read goes when a reopened log's last line is looked for."""

VERIFY_CHUNK = 1 << 20
"""Bytes per read when the whole file is checked against the running digest."""


def _digest() -> hashlib._Hash:
    return hashlib.sha256()  # hardware-accelerated on current x86 and ARM (SHA extensions)


@dataclass(kw_only=True)
class OpenLog(LocalTracked):
    """A session this store writes: its file and how much of it is durable."""

    header_line: bytes
    path: str
    size: int = 0
    fd: int | None = None  # None until materialised
    identity: tuple[int, int] = (0, 0)
    """``(st_dev, st_ino)`` of the file this writer appends to."""
    last_line: bytes = b""
    """The file's last line (newline included) as this writer wrote or found it."""
    digest: hashlib._Hash = field(default_factory=_digest)
    """SHA-256 of the file's first ``size`` bytes, as this writer wrote or found them."""
    stamp: tuple[int, int] = (0, 0)
    """``(st_mtime_ns, st_ctime_ns)`` after this writer's last write or check."""

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
        header line and its whole last line are byte for byte the ones we wrote, so a same-size
        rewrite of either is caught too (one ``fstat``, one ``stat``, two ``pread``s of what is
        in the page cache: the header, typically 100-300 bytes, and the last line, typically a
        few hundred bytes, at most the size of the largest event). When the file's modification
        or change time is not the one this writer left, the whole file is read back and compared
        with the running SHA-256 digest of what was written, so a same-size rewrite of any line
        is caught too; that read happens only after something else touched the file. (A rewrite
        within the same clock tick as dsh's own write leaves both times alone; the header and
        last-line checks still apply then.)
        """
        assert self.fd is not None
        head = self.header_line + b"\n"
        last = self.last_line
        try:
            here = os.fstat(self.fd)
            there = os.stat(self.path)
            same = (
                here.st_size == self.size
                and (here.st_dev, here.st_ino) == self.identity
                and (there.st_dev, there.st_ino) == self.identity
                and os.pread(self.fd, len(head), 0) == head
                and os.pread(self.fd, len(last), self.size - len(last)) == last
            )
            if same and (here.st_mtime_ns, here.st_ctime_ns) != self.stamp:
                same = self._whole_file_unchanged()
                self.stamp = (here.st_mtime_ns, here.st_ctime_ns)
        except FileNotFoundError:
            same = False
        if not same:
            self.broken = SessionModified(str(self.header["id"]))
            raise self.broken

    def _whole_file_unchanged(self) -> bool:
        assert self.fd is not None
        digest, offset = _digest(), 0
        while offset < self.size:
            chunk = os.pread(self.fd, min(VERIFY_CHUNK, self.size - offset), offset)
            if not chunk:
                return False
            digest.update(chunk)
            offset += len(chunk)
        return digest.digest() == self.digest.digest()

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
        self.stamp = (stat.st_mtime_ns, stat.st_ctime_ns)
        self.last_line = _last_line_of(data)
        self.digest.update(data)

    def _append(self, payload: bytes, *, sync: bool) -> None:
        assert self.fd is not None
        before = self.size
        try:
            write_all(self.fd, payload)
            # At once, before the fsync: a foreign write after this fstat changes the times.
            written = os.fstat(self.fd)
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
        self.last_line = _last_line_of(payload)  # payloads are whole lines
        self.digest.update(payload)
        self.stamp = (written.st_mtime_ns, written.st_ctime_ns)


def _last_line_of(data: bytes) -> bytes:
    """The last newline-ended line of ``data`` (which ends with a newline)."""
    return data[data.rfind(b"\n", 0, len(data) - 1) + 1 :]


def _read_last_line(fd: int, size: int) -> bytes:
    """The last line of the first ``size`` bytes of ``fd`` (newline-ended), read backwards."""
    end = size - 1  # the final newline
    start = end
    while start > 0:
        step = min(BACK_STEP, start)
        chunk = os.pread(fd, step, start - step)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            start = start - step + cut + 1
            break
        start -= step
    return os.pread(fd, size - start, start)


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
    raw: bytes,
    stamp: tuple[int, int],
) -> OpenLog:
    """Open a loaded log for appending: cut it back to ``kept_end`` when its tail is ``torn``
    and append ``closers`` (crash-repair lines), durably; the entry that tracks the result.
    ``raw`` is the file as it was read and validated (its first ``kept_end`` bytes are kept),
    ``stamp`` its times then."""
    remove_stale_temps(path)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
    try:
        opened = os.fstat(fd)
        # Unchanged since it was read: this writer's own repair below restamps it. Otherwise
        # the stamp stays unset and the first check reads the whole file back once.
        unchanged = stamp != (0, 0) and (opened.st_mtime_ns, opened.st_ctime_ns) == stamp
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
        last_line = _read_last_line(fd, size)
    except BaseException:
        os.close(fd)
        raise
    digest = _digest()
    digest.update(memoryview(raw)[:kept_end])
    digest.update(closers)
    return OpenLog(
        header=header,
        header_line=header_line,
        path=path,
        lock=lock,
        count=count,
        size=size,
        fd=fd,
        identity=(stat.st_dev, stat.st_ino),
        last_line=last_line,
        digest=digest,
        stamp=(stat.st_mtime_ns, stat.st_ctime_ns) if unchanged else (0, 0),
    )
