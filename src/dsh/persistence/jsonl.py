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

import hashlib
import logging
import os
import secrets
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from dsh.persistence._fold import Fold, line_starts, read_fold, remove_fold, write_fold
from dsh.persistence._local import LocalStore, Parsed, Tracked
from dsh.persistence._locks import WriterLock
from dsh.persistence._paths import (
    cwd_bucket,
    encode_session_id,
    ensure_private_dir,
    fsync_dir,
    is_bucket_name,
    remove_stale_temps,
    unlink_quietly,
    write_all,
)
from dsh.persistence._v0 import (
    check_header,
    gc_paused,
    header_line,
    parse_header,
    restore_log,
    scan_event_lines,
)
from dsh.persistence.base import (
    CorruptSessionLog,
    SessionExists,
    SessionInfo,
    SessionModified,
    SessionNotFound,
    StoreError,
)
from dsh.persistence.coordinator import PluginContext, mount_coordinator
from dsh.session import Event, Session, encode_event
from dsh.session.raw import RawEvents

log = logging.getLogger("dsh.persistence")

__all__ = ["Config", "JsonlStore", "apply", "header_line", "inject", "name"]

_FOLD_SUFFIX = ".fold"
"""A log's fold snapshot is ``<log>.jsonl.fold`` beside it (see :mod:`dsh.persistence._fold`)."""
_TAIL_BYTES = 256
"""How many of its last bytes a writer reads back before each append (see ``_check_unchanged``)."""


# -- the store -------------------------------------------------------------------------------


@dataclass(kw_only=True)
class _OpenLog(Tracked):
    """A session this store writes: its file and how much of it is durable."""

    header_line: bytes
    path: str
    size: int = 0
    fd: int | None = None  # None until materialised
    identity: tuple[int, int] = (0, 0)
    """``(st_dev, st_ino)`` of the file this writer appends to."""
    tail: bytes = b""
    """The last bytes this writer wrote (or found) at the end of the file."""


@dataclass(kw_only=True)
class _ParsedLog(Parsed):
    path: str
    kept_end: int  # byte offset just past the last preserved line
    raw: bytes
    starts: Callable[[], array[int]]
    """Where each preserved event line starts, then ``kept_end`` (computed on demand)."""


class JsonlStore(LocalStore[_OpenLog, _ParsedLog]):
    """Session logs as JSONL files under ``root`` (see the module docstring)."""

    kind = "jsonl"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__()
        self.root = os.path.abspath(os.path.expanduser(os.fspath(root)))
        self.lock_dir = os.path.join(self.root, ".locks")

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

    def _persisted(self, session_id: str) -> bool:
        return bool(self._find(session_id))

    def _require(self, session_id: str) -> None:
        self._find_one(session_id)

    # -- writing -----------------------------------------------------------------------------

    def _track_new(self, header: dict[str, Any], lock: WriterLock) -> _OpenLog:
        path = self.locate(header)
        assert path is not None
        return _OpenLog(header=header, header_line=header_line(header), path=path, lock=lock)

    def _write(self, entry: _OpenLog, events: Sequence[Event], lines: list[bytes], sync: bool) -> None:
        payload = b"\n".join(lines) + b"\n"
        if entry.fd is None:
            self._materialise(entry, payload)
        else:
            self._check_unchanged(str(entry.header["id"]), entry)
            self._append_bytes(entry, payload, sync=sync)

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
        remove_stale_temps(entry.path)
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
                unlink_quietly(entry.path)
            unlink_quietly(temp)
            raise
        unlink_quietly(temp)
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

    def _parse(self, session_id: str, *, repair: bool) -> _ParsedLog:
        path = self._find_one(session_id)
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
        event_lines.pop()  # after the last newline: empty, or a torn line
        with gc_paused():
            # Log-only events the fold never reads stay as their (checked) lines until used.
            events = scan_event_lines(event_lines, path, _file_line, blob=raw, lazy=True)
            kept = event_lines[: len(events)] if len(events) < len(event_lines) else event_lines
            starts = line_starts(header_end, kept)
            session, closers = restore_log(
                session_id,
                header,
                events,
                path,
                repair=repair,
                position=_file_line,
                raw=RawEvents([raw], starts),
            )
        kept_end = starts[-1]
        return _ParsedLog(
            header=header,
            events=session.events,
            session=session,
            closers=closers,
            torn_bytes=len(raw) - kept_end,
            path=path,
            kept_end=kept_end,
            raw=raw,
            starts=lambda: array("Q", starts),
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
            header=header,
            events=session.events,
            session=session,
            closers=closers,
            torn_bytes=len(raw) - kept_end,
            folded=folded,
            path=path,
            kept_end=kept_end,
            raw=raw,
            starts=all_starts,
        )

    def _fix_tail(self, session_id: str, parsed: _ParsedLog, lock: WriterLock) -> _OpenLog:
        path = parsed.path
        remove_stale_temps(path)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        try:
            size = parsed.kept_end
            if parsed.torn_bytes:
                os.ftruncate(fd, size)
                os.fsync(fd)
            if parsed.closers:
                payload = _closer_bytes(parsed.closers)
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
        return _OpenLog(
            header=parsed.header,
            header_line=parsed.raw[: parsed.raw.index(b"\n")],
            path=path,
            lock=lock,
            count=len(parsed.events),
            size=size,
            fd=fd,
            identity=(stat.st_dev, stat.st_ino),
            tail=tail,
        )

    def _write_fold(self, session_id: str, parsed: _ParsedLog) -> None:
        session = parsed.session
        count = len(session)
        starts = parsed.starts()
        position = starts[-1]
        for event in parsed.closers:
            position += len(encode_event(event)) + 1
            starts.append(position)
        key = hashlib.sha1(memoryview(parsed.raw)[: parsed.kept_end], usedforsecurity=False)
        key.update(_closer_bytes(parsed.closers))
        surface, messages, generation, last_turn, open_turn = session.fold_state()
        assert open_turn is None and len(starts) == count + 1
        fold = Fold(
            position, key.digest(), starts.tobytes(), surface, messages, generation, last_turn
        )
        write_fold(parsed.path + _FOLD_SUFFIX, fold)

    def _committed_bytes(self, parsed: _ParsedLog) -> bytes:
        return parsed.raw[: parsed.kept_end]

    def _list(self, limit: int | None, offset: int) -> list[SessionInfo]:
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

    def _delete(self, session_id: str) -> None:
        found = self._find(session_id)
        if not found:
            raise SessionNotFound(session_id)
        for path in found:
            os.unlink(path)
            remove_fold(path + _FOLD_SUFFIX)
            remove_stale_temps(path)
            fsync_dir(os.path.dirname(path))

    def _untrack(self, entry: _OpenLog) -> None:
        if entry.fd is not None:
            os.close(entry.fd)


def _closer_bytes(closers: list[Event]) -> bytes:
    return b"".join(encode_event(event) + b"\n" for event in closers)


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
