"""The JSONL session store (format v0, byte-compatible with the reference) and its plugin.

Owns :class:`JsonlStore`: one file per session, in the v0 line format of
:mod:`dsh.persistence._v0`. Behaviour: docs/format-v0.md, docs/stores.md.

Layout: ``<root>/cwd-<sha256(cwd)[:12]>/<encoded id>.jsonl`` (``_no-cwd/`` without a cwd),
directories 0700, files 0600, writer locks in ``<root>/.locks/``. Line 1 is the header and the
event at index ``i`` is on file line ``i + 2``. Corruption messages name that *file* line number
(counting the header as line 1, unlike the reference's ``line <i+1>``), so ``sed -n <N>p <path>``
shows the offending line.

Durability (the writer's file, :mod:`dsh.persistence._jsonl_file`): a session's file appears on
its first append, fully formed (temp file, fsync, hard link that refuses to overwrite, directory
fsync). Later appends are ``O_APPEND`` writes followed by fsync; a failed write is cut back to
the previous size. Load validates everything *before* writing anything, then truncates a torn
tail and appends crash closers, durably. Before each append the writer checks the file is
exactly as it left it (``OpenLog.check_unchanged``); a load may resume from a fold snapshot
beside the log (:mod:`dsh.persistence._fold`).

Plugin: ``name = "jsonl-sessions"``, config ``{root}`` (required), provides ``session_store``.
"""

from __future__ import annotations

import hashlib
import logging
import os
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec

from dsh.persistence._fold import (
    Fold,
    fold_state,
    line_starts,
    read_fold,
    remove_fold,
    resume,
    snapshot,
    write_fold,
)
from dsh.persistence._jsonl_file import OpenLog, reopen
from dsh.persistence._local import LocalStore, Parsed
from dsh.persistence._locks import WriterLock
from dsh.persistence._paths import (
    cwd_bucket,
    encode_session_id,
    fsync_dir,
    is_bucket_name,
    remove_stale_temps,
)
from dsh.persistence._v0 import (
    check_header,
    file_line,
    gc_paused,
    header_line,
    parse_header,
    restore_log,
    scan_event_lines,
    scan_lazily,
    split_header,
)
from dsh.persistence.base import (
    SessionInfo,
    SessionNotFound,
    StoreError,
)
from dsh.persistence.coordinator import PluginContext, mount_coordinator
from dsh.session import Event, Session, encode_event
from dsh.session.raw import RawEvents
from dsh.session.vocab import JsonObject

log = logging.getLogger("dsh.persistence")

__all__ = ["Config", "JsonlStore", "apply", "header_line", "inject", "name"]

_FOLD_SUFFIX = ".fold"
"""A log's fold snapshot is ``<log>.jsonl.fold`` beside it (see :mod:`dsh.persistence._fold`)."""


# -- the store -------------------------------------------------------------------------------


@dataclass(kw_only=True)
class _ParsedLog(Parsed):
    path: str
    kept_end: int  # byte offset just past the last preserved line
    raw: bytes
    starts: Callable[[], array[int]]
    """Where each preserved event line starts, then ``kept_end`` (computed on demand)."""
    stamp: tuple[int, int] = (0, 0)
    """``(st_mtime_ns, st_ctime_ns)`` of the file while ``raw`` was read (0s if it changed)."""


class JsonlStore(LocalStore[OpenLog, _ParsedLog]):
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

    def _buckets(self) -> list[str]:
        """The cwd bucket directories under the root, sorted (none before the first write)."""
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        return [name for name in names if is_bucket_name(name)]

    def _find(self, session_id: str) -> list[str]:
        name = encode_session_id(session_id) + ".jsonl"
        found = []
        for bucket in self._buckets():
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

    def _track_new(self, header: JsonObject, lock: WriterLock) -> OpenLog:
        path = self.locate(header)
        assert path is not None
        return OpenLog(header=header, header_line=header_line(header), path=path, lock=lock)

    def _write(self, entry: OpenLog, events: Sequence[Event], lines: list[bytes], sync: bool) -> None:
        entry.write(b"\n".join(lines) + b"\n", sync=sync)

# -- loading -----------------------------------------------------------------------------

    def _parse(self, session_id: str, *, repair: bool) -> _ParsedLog:
        path = self._find_one(session_id)
        with open(path, "rb") as file:
            before = os.fstat(file.fileno())
            raw = file.read()
            after = os.fstat(file.fileno())
        # What the foreign-writer check starts from (see OpenLog.check_unchanged).
        stamp = (after.st_mtime_ns, after.st_ctime_ns)
        if stamp != (before.st_mtime_ns, before.st_ctime_ns) or after.st_size != len(raw):
            stamp = (0, 0)
        header, header_end = split_header(raw, path)
        check_header(header, session_id, path)
        found = read_fold(path + _FOLD_SUFFIX, raw, header_end)
        with gc_paused():
            if found is None:
                scan = _scan(path, session_id, raw, header, header_end, repair=repair)
            else:
                scan = _scan_after_fold(path, session_id, raw, header, *found, repair=repair)
        return _ParsedLog(
            header=header,
            events=scan.session.events,
            session=scan.session,
            closers=scan.closers,
            torn_bytes=len(raw) - scan.kept_end,
            folded=scan.folded,
            path=path,
            kept_end=scan.kept_end,
            raw=raw,
            starts=scan.starts,
            stamp=stamp,
        )

    def _fix_tail(self, session_id: str, parsed: _ParsedLog, lock: WriterLock) -> OpenLog:
        return reopen(
            parsed.path,
            header=parsed.header,
            header_line=parsed.raw[: parsed.raw.index(b"\n")],
            lock=lock,
            count=len(parsed.events),
            kept_end=parsed.kept_end,
            torn=parsed.torn_bytes > 0,
            closers=_closer_bytes(parsed.closers),
            raw=parsed.raw,
            stamp=parsed.stamp,
        )

    def _fold_writer(self, session_id: str, parsed: _ParsedLog) -> Callable[[], None]:
        state = fold_state(parsed.session)

        def write() -> None:
            starts = parsed.starts()
            position = starts[-1]
            for event in parsed.closers:
                position += len(encode_event(event)) + 1
                starts.append(position)
            key = hashlib.sha1(memoryview(parsed.raw)[: parsed.kept_end], usedforsecurity=False)
            key.update(_closer_bytes(parsed.closers))
            write_fold(parsed.path + _FOLD_SUFFIX, snapshot(state, key.digest(), starts))

        return write

    def _committed_bytes(self, parsed: _ParsedLog) -> bytes:
        return parsed.raw[: parsed.kept_end]

    def _list(self, limit: int | None, offset: int) -> list[SessionInfo]:
        infos: list[SessionInfo] = []
        for bucket in self._buckets():
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

    def _untrack(self, entry: OpenLog) -> None:
        entry.close()


class _Scan(NamedTuple):
    """What a scan of a log's lines found."""

    session: Session
    closers: list[Event]
    kept_end: int
    starts: Callable[[], array[int]]
    folded: int


def _scan(
    path: str, session_id: str, raw: bytes, header: JsonObject, header_end: int, *, repair: bool
) -> _Scan:
    """Check every event line of ``raw`` (no snapshot)."""
    # Log-only events the fold never reads stay as their (checked) lines until used.
    lazy = scan_lazily(raw, header_end, raw.rfind(b"\n") + 1, path, file_line)
    starts = lazy.starts
    session, closers = restore_log(
        session_id,
        header,
        lazy.items,
        path,
        repair=repair,
        position=file_line,
        raw=RawEvents([raw], starts),
        lazy=lazy,
    )
    return _Scan(session, closers, starts[-1], lambda: array("Q", starts), 0)


def _scan_after_fold(
    path: str,
    session_id: str,
    raw: bytes,
    header: JsonObject,
    fold: Fold,
    starts: array[int],
    *,
    repair: bool,
) -> _Scan:
    """Resume from a fold snapshot that covers ``raw[:fold.size]``; check only the rest."""
    folded = len(starts) - 1
    event_lines = raw[fold.size :].split(b"\n")
    torn = event_lines.pop()
    events = scan_event_lines(event_lines, path, file_line, blob=raw[fold.size :], first=folded)
    base = resume(fold, session_id, RawEvents([raw], starts), header)
    session, closers = restore_log(
        session_id, header, events, path, repair=repair, position=file_line, base=base
    )
    kept = event_lines[: len(events)] if len(events) < len(event_lines) else event_lines
    if len(events) == len(event_lines):
        kept_end = len(raw) - len(torn)
    else:
        kept_end = fold.size + sum(len(line) + 1 for line in kept)

    def all_starts() -> array[int]:
        return starts[:-1] + line_starts(fold.size, kept)

    return _Scan(session, closers, kept_end, all_starts, folded)


def _closer_bytes(closers: list[Event]) -> bytes:
    return b"".join(encode_event(event) + b"\n" for event in closers)


HEADER_LIMIT = 1 << 20
"""A header line longer than this is not listed (headers are a few hundred bytes)."""

_STEP = 1 << 16


def _peek(path: str) -> SessionInfo | None:
    """Header and facts of one log file, reading a bounded header line and, to see that one
    complete event line follows it, at most the file's torn tail (backwards, a block at a time):
    never a whole event line into memory, so a 1 GB line costs nothing here."""
    try:
        with open(path, "rb") as file:
            fd = file.fileno()
            stat = os.fstat(fd)
            head = os.pread(fd, HEADER_LIMIT + 1, 0)
            end = head.find(b"\n")
            if end < 0:
                return None
            header = parse_header(head[:end], path)
            if not _has_complete_line_after(fd, end, stat.st_size):
                return None  # zero-event logs are absent
    except (OSError, StoreError) as exc:
        log.debug("skipping %s in session list: %s", path, exc)
        return None
    return SessionInfo(header=header, location=path, modified_ms=stat.st_mtime_ns // 1_000_000)


def _has_complete_line_after(fd: int, header_newline: int, size: int) -> bool:
    """Whether a newline ends a line that starts after the header (the last one found first)."""
    position = size
    while position > header_newline + 1:
        start = max(header_newline + 1, position - _STEP)
        if b"\n" in os.pread(fd, position - start, start):
            return True
        position = start
    return False


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
