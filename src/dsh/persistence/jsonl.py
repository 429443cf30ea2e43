"""The JSONL session store (format v0, byte-compatible with the reference) and its plugin.

Owns :class:`JsonlStore`: one file per session, in the v0 line format of
:mod:`dsh.persistence._v0`. Behaviour: contracts §2.3.

Layout: ``<root>/cwd-<sha256(cwd)[:12]>/<encoded id>.jsonl`` (``_no-cwd/`` without a cwd),
directories 0700, files 0600, writer locks in ``<root>/.locks/``. Line 1 is the header and the
event at index ``i`` is on file line ``i + 2``. Corruption messages name that *file* line number
(counting the header as line 1, unlike the reference's ``line <i+1>``), so ``sed -n <N>p <path>``
shows the offending line.

Durability: a session's file appears on its first append, fully formed (temp file, fsync, hard
link that refuses to overwrite, directory fsync). Later appends are ``O_APPEND`` writes followed
by fsync; a failed write is cut back to the previous size. Load validates everything *before*
writing anything, then truncates a torn tail and appends crash closers, durably. Before each
append the writer checks the file is exactly as it left it (``_check_unchanged``); a load may
resume from a fold snapshot beside the log (:mod:`dsh.persistence._fold`).

Plugin: ``name = "jsonl-sessions"``, config ``{root}`` (required), provides ``session_store``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from dsh.persistence._fold import MIN_EVENTS, Fold, line_starts, read_fold, remove_fold, write_fold
from dsh.persistence._locks import WriterLock, acquire
from dsh.persistence._paths import (
    cwd_bucket,
    encode_session_id,
    ensure_private_dir,
    fsync_dir,
    is_bucket_name,
    write_all,
)
from dsh.persistence._v0 import (
    check_header,
    encode_event_lines,
    gc_paused,
    header_line,
    make_header,
    parse_header,
    restore_log,
    scan_event_lines,
)
from dsh.persistence.base import (
    CorruptSessionLog,
    SessionExists,
    SessionInfo,
    SessionLocked,
    SessionModified,
    SessionNotFound,
    SessionStore,
    StoredSession,
    StoreError,
)
from dsh.persistence.coordinator import PluginContext, mount_coordinator
from dsh.session import Event, Session, encode_event
from dsh.session.log import RawEvents

log = logging.getLogger("dsh.persistence")

__all__ = ["Config", "JsonlStore", "apply", "header_line", "inject", "name"]

_FOLD_SUFFIX = ".fold"
"""A log's fold snapshot is ``<log>.jsonl.fold`` beside it (see :mod:`dsh.persistence._fold`)."""
_TAIL_BYTES = 256
"""How many of its last bytes a writer reads back before each append (see ``_check_unchanged``)."""


# -- the store -------------------------------------------------------------------------------


@dataclass
class _OpenLog:
    """A session this store writes: its lock, its file and how much of it is durable."""

    header: dict[str, Any]
    header_line: bytes
    path: str
    lock: WriterLock
    count: int = 0
    size: int = 0
    fd: int | None = None  # None until materialised
    broken: StoreError | None = None
    identity: tuple[int, int] = (0, 0)
    """``(st_dev, st_ino)`` of the file this writer appends to."""
    tail: bytes = b""
    """The last bytes this writer wrote (or found) at the end of the file."""


@dataclass
class _ParsedLog:
    header: dict[str, Any]
    events: Sequence[Event]
    """The preserved events, then the closers (when repairing)."""
    session: Session
    closers: list[Event]
    kept_end: int  # byte offset just past the last preserved line
    size: int
    raw: bytes
    starts: Callable[[], array[int]]
    """Where each preserved event line starts, then ``kept_end`` (computed on demand)."""
    folded: int = 0
    """How many events a fold snapshot covered (0: none was used)."""


class JsonlStore(SessionStore):
    """Session logs as JSONL files under ``root`` (see the module docstring)."""

    kind = "jsonl"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.abspath(os.path.expanduser(os.fspath(root)))
        self.lock_dir = os.path.join(self.root, ".locks")
        self._open: dict[str, _OpenLog] = {}

    def __repr__(self) -> str:
        return f"JsonlStore({self.root!r})"

    # -- paths -------------------------------------------------------------------------------

    def locate(self, header: dict[str, Any]) -> str | None:
        bucket = cwd_bucket(header.get("cwd"))
        return os.path.join(self.root, bucket, encode_session_id(header["id"]) + ".jsonl")

    def _find(self, session_id: str) -> list[str]:
        name = encode_session_id(session_id) + ".jsonl"
        try:
            buckets = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        found = []
        for bucket in buckets:
            if is_bucket_name(bucket):
                path = os.path.join(self.root, bucket, name)
                if os.path.isfile(path):
                    found.append(path)
        return found

    def _find_one(self, session_id: str) -> str:
        found = self._find(session_id)
        if not found:
            raise SessionNotFound(session_id)
        if len(found) > 1:
            raise StoreError(
                f'session "{session_id}" has logs in several cwd buckets: {", ".join(found)}'
            )
        return found[0]

    # -- writing -----------------------------------------------------------------------------

    async def create(self, header: dict[str, Any]) -> None:
        clean = make_header(header)
        session_id: str = clean["id"]
        if session_id in self._open:
            raise SessionExists(f'session "{session_id}" already exists in this backend')
        lock = acquire(self.lock_dir, session_id)
        try:
            if self._find(session_id):
                raise SessionExists(
                    f'session "{session_id}" already has a persisted log on disk; '
                    "load/resume it instead of creating"
                )
            path = self.locate(clean)
            assert path is not None
        except BaseException:
            lock.release()
            raise
        self._open[session_id] = _OpenLog(clean, header_line(clean), path, lock)

    async def append(self, session_id: str, events: Sequence[Event], *, sync: bool = True) -> None:
        entry = self._open.get(session_id)
        if entry is None:
            raise StoreError(f'session "{session_id}" is not open in this backend')
        if entry.broken is not None:
            raise entry.broken.with_traceback(None)
        lines = encode_event_lines(session_id, events, entry.count)
        if not lines:
            return
        payload = b"\n".join(lines) + b"\n"
        if entry.fd is None:
            self._materialise(entry, payload)
        else:
            self._check_unchanged(session_id, entry)
            self._append_bytes(entry, payload, sync=sync)
        entry.count += len(lines)

    def _check_unchanged(self, session_id: str, entry: _OpenLog) -> None:
        """Refuse to append unless the file is exactly as this writer left it.

        The writer lock only keeps other dsh processes out; another program (the reference
        harness resuming the same session, an editor) can still write. Appending after it would
        leave a log neither can load, so the session stops being written and the file is left
        alone. Checked: the path still names our inode, its size is the size we left, and its
        last bytes are the ones we wrote (one ``fstat``, one ``stat``, one small ``pread``).
        """
        assert entry.fd is not None
        try:
            here = os.fstat(entry.fd)
            there = os.stat(entry.path)
            same = (
                here.st_size == entry.size
                and (here.st_dev, here.st_ino) == entry.identity
                and (there.st_dev, there.st_ino) == entry.identity
                and os.pread(entry.fd, len(entry.tail), entry.size - len(entry.tail)) == entry.tail
            )
        except FileNotFoundError:
            same = False
        if not same:
            entry.broken = SessionModified(session_id)
            raise entry.broken

    def _materialise(self, entry: _OpenLog, payload: bytes) -> None:
        directory = os.path.dirname(entry.path)
        ensure_private_dir(directory)
        _remove_stale_temps(entry.path)
        temp = f"{entry.path}.{secrets.token_hex(6)}.tmp"
        data = entry.header_line + b"\n" + payload
        # Read-write: the foreign-writer check reads back the last bytes written.
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        published = False
        try:
            os.fchmod(fd, 0o600)
            write_all(fd, data)
            os.fsync(fd)
            try:
                os.link(temp, entry.path)
            except FileExistsError:
                raise SessionExists(
                    f'session "{entry.header["id"]}" already has a persisted log on disk; '
                    "load/resume it instead of creating"
                ) from None
            published = True
            fsync_dir(directory)
        except BaseException:
            os.close(fd)
            if published:
                _unlink_quietly(entry.path)
            _unlink_quietly(temp)
            raise
        _unlink_quietly(temp)
        entry.fd = fd  # O_APPEND on the published inode: later appends go through it
        entry.size = len(data)
        stat = os.fstat(fd)
        entry.identity = (stat.st_dev, stat.st_ino)
        entry.tail = data[-_TAIL_BYTES:]

    def _append_bytes(self, entry: _OpenLog, payload: bytes, *, sync: bool) -> None:
        assert entry.fd is not None
        before = entry.size
        try:
            write_all(entry.fd, payload)
            if sync:  # a later fsync of this file covers a checkpoint's bytes too
                os.fsync(entry.fd)
        except BaseException:
            try:
                os.ftruncate(entry.fd, before)
                os.fsync(entry.fd)
            except OSError as exc:
                entry.broken = StoreError(
                    f"session log {entry.path} is in an unknown state after a failed append "
                    f"({exc}); load it again"
                )
            raise
        entry.size = before + len(payload)
        entry.tail = (
            payload[-_TAIL_BYTES:]
            if len(payload) >= _TAIL_BYTES
            else (entry.tail + payload)[-_TAIL_BYTES:]
        )

    # -- loading -----------------------------------------------------------------------------

    def _parse(self, path: str, session_id: str, *, repair: bool) -> _ParsedLog:
        with open(path, "rb") as file:
            raw = file.read()
        header_end = raw.find(b"\n") + 1
        if not header_end:
            raise CorruptSessionLog(f"empty or header-less session log: {path}")
        header = parse_header(raw[: header_end - 1], path)
        check_header(header, session_id, path)
        found = read_fold(path + _FOLD_SUFFIX, raw, header_end)
        if found is not None:
            return self._parse_after_fold(path, session_id, raw, header, found, repair=repair)
        event_lines = raw[header_end:].split(b"\n")
        torn = event_lines.pop()  # after the last newline: empty, or a torn line
        with gc_paused():
            events = scan_event_lines(event_lines, path, _file_line, blob=raw)
            session, closers = restore_log(
                session_id, header, events, path, repair=repair, position=_file_line
            )
        kept = event_lines[: len(events)] if len(events) < len(event_lines) else event_lines
        if len(events) == len(event_lines):
            kept_end = len(raw) - len(torn)
        else:
            kept_end = header_end + sum(len(line) + 1 for line in kept)
        return _ParsedLog(
            header,
            events + closers if closers else events,
            session,
            closers,
            kept_end,
            len(raw),
            raw,
            lambda: line_starts(header_end, kept),
        )

    def _parse_after_fold(
        self,
        path: str,
        session_id: str,
        raw: bytes,
        header: dict[str, Any],
        found: tuple[Fold, array[int]],
        *,
        repair: bool,
    ) -> _ParsedLog:
        """Resume from a fold snapshot that covers ``raw[:fold.size]``; check only the rest."""
        fold, starts = found
        folded = len(starts) - 1
        event_lines = raw[fold.size :].split(b"\n")
        torn = event_lines.pop()
        with gc_paused():
            events = scan_event_lines(
                event_lines, path, _file_line, blob=raw[fold.size :], first=folded
            )
            base = Session.from_fold(
                session_id,
                RawEvents([raw], starts),
                header=header,
                surface=fold.surface,
                messages=fold.messages,
                replace_generation=fold.replace_generation,
                last_turn=fold.last_turn,
                open_turn=None,
            )
            session, closers = restore_log(
                session_id, header, events, path, repair=repair, position=_file_line, base=base
            )
        kept = event_lines[: len(events)] if len(events) < len(event_lines) else event_lines
        if len(events) == len(event_lines):
            kept_end = len(raw) - len(torn)
        else:
            kept_end = fold.size + sum(len(line) + 1 for line in kept)

        def all_starts() -> array[int]:
            return starts[:-1] + line_starts(fold.size, kept)

        return _ParsedLog(
            header,
            session.events,
            session,
            closers,
            kept_end,
            len(raw),
            raw,
            all_starts,
            folded,
        )

    def _refresh_fold(self, path: str, parsed: _ParsedLog, closers: bytes) -> None:
        """Write a snapshot of the loaded log when one would spare the next load real work.

        Only for logs of :data:`MIN_EVENTS` or more whose last event is a ``turn/end`` (so a
        resume from it needs no look back into the prefix), and only when the snapshot in place
        does not already cover nearly all of it.
        """
        session = parsed.session
        count = len(session)
        if count < MIN_EVENTS or count - parsed.folded < 64:
            return
        if session.events[count - 1].type != "turn/end":
            return
        starts = parsed.starts()
        position = starts[-1]
        for event in parsed.closers:
            position += len(encode_event(event)) + 1
            starts.append(position)
        key = hashlib.sha1(memoryview(parsed.raw)[: parsed.kept_end], usedforsecurity=False)
        key.update(closers)
        surface, messages, generation, last_turn, open_turn = session.fold_state()
        assert open_turn is None and len(starts) == count + 1
        fold = Fold(
            position, key.digest(), starts.tobytes(), surface, messages, generation, last_turn
        )
        write_fold(path + _FOLD_SUFFIX, fold)

    async def load(self, session_id: str) -> StoredSession:
        if session_id in self._open:
            raise SessionExists(f'session "{session_id}" already exists in this backend')
        self._find_one(session_id)  # fail fast, creating nothing, when there is no log
        lock = acquire(self.lock_dir, session_id)
        try:
            path = self._find_one(session_id)  # again under the lock
            parsed = self._parse(path, session_id, repair=True)
            _remove_stale_temps(path)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
            payload = b""
            try:
                size = parsed.kept_end
                if parsed.size > size:
                    os.ftruncate(fd, size)
                    os.fsync(fd)
                if parsed.closers:
                    payload = b"".join(encode_event(event) + b"\n" for event in parsed.closers)
                    try:
                        write_all(fd, payload)
                        os.fsync(fd)
                    except BaseException:
                        os.ftruncate(fd, size)
                        raise
                    size += len(payload)
                stat = os.fstat(fd)
                tail = os.pread(fd, min(size, _TAIL_BYTES), max(0, size - _TAIL_BYTES))
            except BaseException:
                os.close(fd)
                raise
        except BaseException:
            lock.release()
            raise
        self._refresh_fold(path, parsed, payload)
        events = parsed.events
        self._open[session_id] = _OpenLog(
            parsed.header,
            parsed.raw[: parsed.raw.index(b"\n")],
            path,
            lock,
            count=len(events),
            size=size,
            fd=fd,
            identity=(stat.st_dev, stat.st_ino),
            tail=tail,
        )
        return StoredSession(
            header=parsed.header,
            events=events,
            repaired=len(parsed.closers),
            truncated_bytes=parsed.size - parsed.kept_end,
            session=parsed.session,
        )

    async def read(self, session_id: str) -> StoredSession:
        parsed = self._parse(self._find_one(session_id), session_id, repair=False)
        return StoredSession(header=parsed.header, events=parsed.events, session=parsed.session)

    async def export(self, session_id: str) -> bytes:
        parsed = self._parse(self._find_one(session_id), session_id, repair=False)
        return parsed.raw[: parsed.kept_end]

    async def list(self, *, limit: int | None = None, offset: int = 0) -> list[SessionInfo]:
        infos: list[SessionInfo] = []
        try:
            buckets = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        for bucket in buckets:
            if not is_bucket_name(bucket):
                continue
            try:
                entries = list(os.scandir(os.path.join(self.root, bucket)))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                if not entry.name.endswith(".jsonl") or not entry.is_file():
                    continue
                info = _peek(entry.path)
                if info is not None:
                    infos.append(info)
        infos.sort(key=lambda info: (-info.header["createdAt"], info.id))
        end = None if limit is None else offset + limit
        return infos[offset:end]

    async def remove(self, session_id: str) -> None:
        if session_id in self._open:
            raise SessionLocked(session_id)
        lock = acquire(self.lock_dir, session_id)
        try:
            found = self._find(session_id)
            if not found:
                raise SessionNotFound(session_id)
            for path in found:
                os.unlink(path)
                remove_fold(path + _FOLD_SUFFIX)
                _remove_stale_temps(path)
                fsync_dir(os.path.dirname(path))
        finally:
            lock.release()

    # -- tracking ----------------------------------------------------------------------------

    def stored_count(self, session_id: str) -> int | None:
        entry = self._open.get(session_id)
        return None if entry is None else entry.count

    async def release(self, session_id: str) -> None:
        entry = self._open.pop(session_id, None)
        if entry is None:
            return
        try:
            if entry.fd is not None:
                os.close(entry.fd)
        finally:
            entry.lock.release()

    async def close(self) -> None:
        errors: list[Exception] = []
        for session_id in list(self._open):
            try:
                await self.release(session_id)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise ExceptionGroup("jsonl store close failed", errors)


def _file_line(index: int) -> tuple[str, str]:
    """Event ``index`` is "line index+1" as the reference counts (event lines only), and line
    ``index+2`` of the file (the header is line 1)."""
    return f"line {index + 1}", f", file line {index + 2}"


def _peek(path: str) -> SessionInfo | None:
    """Header and facts of one log file, reading only its first lines."""
    try:
        with open(path, "rb") as file:
            stat = os.fstat(file.fileno())
            buffer = file.read(65536)
            while b"\n" not in buffer:
                more = file.read(65536)
                if not more or len(buffer) > 16 << 20:
                    return None
                buffer += more
            end = buffer.index(b"\n")
            header = parse_header(buffer[:end], path)
            # Zero-event logs are absent: require one complete event line.
            while b"\n" not in buffer[end + 1 :]:
                more = file.read(65536)
                if not more:
                    return None
                buffer += more
    except (OSError, StoreError) as exc:
        log.debug("skipping %s in session list: %s", path, exc)
        return None
    return SessionInfo(header=header, location=path, modified_ms=stat.st_mtime_ns // 1_000_000)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _remove_stale_temps(final: str) -> None:
    """Drop ``<final>.<hex>.tmp`` files a crashed writer left (the caller holds the lock)."""
    directory, base = os.path.split(final)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    prefix = base + "."
    for entry in names:
        if entry.startswith(prefix) and entry.endswith(".tmp") and len(entry) == len(base) + 17:
            _unlink_quietly(os.path.join(directory, entry))


# -- plugin ----------------------------------------------------------------------------------

name = "jsonl-sessions"
inject: list[str] = []


class Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """``root``: the directory that holds the session logs (required, no default)."""

    root: str


def apply(ctx: PluginContext, config: Config) -> None:
    """Provide ``session_store`` and mount the write coordinator on this plugin's fiber."""
    store = JsonlStore(config.root)
    ctx.provide("session_store", store)
    mount_coordinator(ctx, store)
