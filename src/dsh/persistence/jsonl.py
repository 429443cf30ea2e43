"""The JSONL session store (format v0, byte-compatible with the reference) and its plugin.

Owns :class:`JsonlStore` and the v0 *line format* that every dsh backend shares: the header
line, checked event-line encoding (:func:`encode_event_lines`), and the committed-region scan
with its corruption rules (:func:`scan_event_lines`, :func:`restore_log`). The SQLite store
stores these same lines, so it reuses them. Behaviour: contracts §2.3.

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
import gc
import hashlib
import json
import logging
import os
import re
import secrets
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgspec

from dsh import _json
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
from dsh.persistence.base import (
    AppendSeqMismatch,
    CorruptSessionLog,
    InvalidSessionId,
    SessionExists,
    SessionInfo,
    SessionLocked,
    SessionModified,
    SessionNotFound,
    SessionStore,
    StoredSession,
    StoreError,
    UnsupportedVersion,
)
from dsh.persistence.coordinator import PluginContext, mount_coordinator
from dsh.session import Event, InvalidEventError, Session, encode_event, interrupted_turn_closers
from dsh.session.event import check_surface_fields, check_vocabulary, restore_key_order
from dsh.session.log import RawEvents

log = logging.getLogger("dsh.persistence")

__all__ = [
    "Config",
    "JsonlStore",
    "apply",
    "check_header",
    "encode_event_lines",
    "gc_paused",
    "header_line",
    "inject",
    "make_header",
    "name",
    "parse_header",
    "restore_log",
    "scan_event_lines",
]

_HEADER_OPTIONALS = (("cwd", str), ("parentSession", str), ("seedLength", int))
_EVENT_DECODER = msgspec.json.Decoder(Event)
_NEG_ZERO_HINTS = (b":-0", b",-0", b"[-0")
_FOLD_SUFFIX = ".fold"
"""A log's fold snapshot is ``<log>.jsonl.fold`` beside it (see :mod:`dsh.persistence._fold`)."""
_TAIL_BYTES = 256
"""How many of its last bytes a writer reads back before each append (see ``_check_unchanged``)."""


# -- header ----------------------------------------------------------------------------------


def make_header(header: Mapping[str, Any]) -> dict[str, Any]:
    """Check a header for ``create`` and return it in reference key order (without ``type``).

    Keys: ``version, id, createdAt, cwd?, parentSession?, seedLength?``; absent or ``None``
    optionals are omitted, unknown keys dropped.
    """
    session_id = header.get("id")
    if type(session_id) is not str:
        raise InvalidSessionId("session id must be a non-empty string")
    encode_session_id(session_id)  # emptiness and length
    _check_text(session_id, "session id", InvalidSessionId)
    version = header.get("version", 0)
    if type(version) is not int or version != 0:
        raise UnsupportedVersion(
            f'unsupported session format version {_number_text(version)} for "{session_id}" '
            "(only v0 is supported)"
        )
    created_at = header.get("createdAt")
    if type(created_at) is not int or created_at < 0:
        raise ValueError(f'session header "{session_id}": createdAt must be epoch milliseconds')
    out: dict[str, Any] = {"version": 0, "id": session_id, "createdAt": created_at}
    for key, kind in _HEADER_OPTIONALS:
        value = header.get(key)
        if value is None:
            continue
        if type(value) is not kind:
            raise ValueError(f'session header "{session_id}": {key} must be a {kind.__name__}')
        if isinstance(value, str):
            _check_text(value, key, ValueError)
        out[key] = value
    return out


def header_line(header: Mapping[str, Any]) -> bytes:
    """The durable header line (no newline): ``{"type":"session", ...header}``."""
    return _json.encode({"type": "session", **header})


def parse_header(line: bytes, where: str) -> dict[str, Any]:
    """Parse and check a header line; returns the mapping *without* ``type``."""
    try:
        value = _json.decode(line)
    except (msgspec.DecodeError, ValueError, RecursionError):
        raise corrupt(where, "header line is not valid JSON") from None
    if not (
        type(value) is dict
        and value.get("type") == "session"
        and _is_number(value.get("version"))
        and _is_number(value.get("createdAt"))
        and type(value.get("id")) is str
        and all(
            value.get(key) is None or type(value[key]) is kind for key, kind in _HEADER_OPTIONALS
        )
    ):
        raise corrupt(where, "first line is not a session header")
    return {key: item for key, item in value.items() if key != "type"}


def check_header(header: Mapping[str, Any], session_id: str, where: str) -> None:
    """Refuse an unsupported version or a header that names another session."""
    version = header["version"]
    if version != 0:
        raise UnsupportedVersion(
            f'unsupported session format version {_number_text(version)} for "{session_id}" '
            "(only v0 is supported)"
        )
    if header["id"] != session_id:
        raise corrupt(where, f'header names session "{header["id"]}", not "{session_id}"')


def _is_number(value: object) -> bool:
    return type(value) is int or type(value) is float


def _number_text(value: object) -> str:
    if type(value) is float and value.is_integer():
        return str(int(value))
    try:
        return _json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _check_text(value: str, what: str, error: type[Exception]) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise error(f"{what} is not valid Unicode text (lone surrogate)") from None


# -- event lines -----------------------------------------------------------------------------


def encode_event_lines(session_id: str, events: Sequence[Event], next_seq: int) -> list[bytes]:
    """Check an append batch and return its durable lines (no newlines).

    Raises :class:`AppendSeqMismatch` (``append seq mismatch for "<id>": expected N at index i,
    got M``), ``TypeError`` for data that is not lossless JSON (the session core's text), or
    :class:`~dsh.session.InvalidEventError` for a broken envelope.
    """
    lines: list[bytes] = []
    for index, event in enumerate(events):
        expected = next_seq + index
        if not isinstance(event, Event):
            raise TypeError(f"append expects Event objects, got {type(event).__name__}")
        if type(event.seq) is not int or event.seq != expected:
            raise AppendSeqMismatch(
                f'append seq mismatch for "{session_id}": expected {expected} at index {index}, '
                f"got {event.seq!r}"
            )
        lines.append(_encode_checked(event))
    return lines


def _encode_checked(event: Event) -> bytes:
    kind = event.type
    if type(kind) is not str or not kind:
        raise InvalidEventError("session event type must be a non-empty string")
    if type(event.time) is not int or event.time < 0:
        raise InvalidEventError(f'session event "{kind}" time must be a non-negative integer')
    check_surface_fields(kind, event.seq, event.surface_op, event.source_event_seqs)
    check_vocabulary(kind, event.data)
    not_json = TypeError(f'session event "{kind}" carries non-JSON-serializable data')
    try:
        line = encode_event(event)
        back = _EVENT_DECODER.decode(line)
    except (TypeError, ValueError, RecursionError, OverflowError, msgspec.MsgspecError):
        raise not_json from None
    # msgspec coerces what JSON cannot hold (NaN -> null, tuples -> arrays, int keys -> str):
    # such values no longer compare equal after the round trip. -0.0 does, so look for it.
    if (
        back.data != event.data
        or back.surface_op != event.surface_op
        or back.source_event_seqs != event.source_event_seqs
        or (
            any(hint in line for hint in _NEG_ZERO_HINTS)
            and not (
                _json.is_lossless(event.data)
                and _json.is_lossless(event.surface_op)
                and _json.is_lossless(event.source_event_seqs)
            )
        )
    ):
        raise not_json
    return line


def _has_negative_zero(line: bytes) -> bool:
    """Whether a JSON text holds a ``-0`` number token (strings are never looked at)."""
    found = False

    def number(text: str) -> int:
        nonlocal found
        if text.startswith("-") and float(text) == 0:
            found = True
        return 0

    try:
        json.loads(line, parse_int=number, parse_float=number)
    except (ValueError, RecursionError):
        return False
    return found


def _may_hold_negative_zero(blob: bytes) -> bool:
    """Whether ``blob`` has ``:-0``, ``,-0`` or ``[-0`` (where a ``-0`` number would sit).

    One pass over the ``-0`` hits (dates put thousands in a long log); past a cap, three
    substring scans are cheaper than the Python loop.
    """
    find = blob.find
    at = find(b"-0")
    hits = 0
    while at != -1:
        if at and blob[at - 1] in b":,[":
            return True
        hits += 1
        if hits > 50_000:
            return any(hint in blob for hint in _NEG_ZERO_HINTS)
        at = find(b"-0", at + 2)
    return False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while a large log is decoded and folded.

    Decoding allocates hundreds of thousands of containers that all survive; without this the
    collector walks the growing heap again and again (a third of the load time at 100k events).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _decode_or_none(line: bytes) -> Event | None:
    try:
        return _EVENT_DECODER.decode(line)
    except Exception:
        return None


Position = Callable[[int], tuple[str, str]]
"""Where event ``i`` is: the reference's wording (``line i+1``, ``row i+1``) and an extra locator."""


def corrupt(where: str, detail: str) -> CorruptSessionLog:
    """``corrupt session log: <detail> (<where>)``: the reference's text, then the location."""
    return CorruptSessionLog(f"corrupt session log: {detail} ({where})")


def scan_event_lines(
    lines: Sequence[bytes],
    where: str,
    position: Position,
    *,
    blob: bytes | None = None,
    first: int = 0,
) -> list[Event]:
    """Decode event lines and return the preserved prefix (contracts §2.3, "Load and scan").

    Finds the last ``turn/end`` that parses; an unparsable line or a ``seq`` that is not its
    index at or before it raises :class:`CorruptSessionLog` (``corrupt session log: unparsable
    committed event at line <i+1> (<where>)`` / ``corrupt session log: seq gap in committed
    region at line <i+1> (expected i, got s) (<where>)``, as the reference words them). After it, the first such line ends the walk: it and
    everything after is torn tail. ``blob`` (all lines' bytes) speeds up the ``-0`` check.
    ``first`` is the index of ``lines[0]`` in the log, when the lines before it were checked
    already (they end at a ``turn/end``, so the committed region is decided by these lines).
    """
    count = len(lines)
    decoded: list[Event | None]
    try:
        decoded = list(map(_EVENT_DECODER.decode, lines))
    except Exception:
        decoded = [_decode_or_none(line) for line in lines]
    for index, event in enumerate(decoded):
        if event is not None and (
            event.surface_first
            or (event.surface_op is not None and event.source_event_seqs is not None)
        ):
            try:
                decoded[index] = restore_key_order(event, lines[index])
            except msgspec.ValidationError:  # a line spelling out "surface_first"
                decoded[index] = None
    haystack = blob if blob is not None else b"\n".join(lines)
    if _may_hold_negative_zero(haystack):
        for index, line in enumerate(lines):
            if (
                decoded[index] is not None
                and any(hint in line for hint in _NEG_ZERO_HINTS)
                and _has_negative_zero(line)
            ):
                decoded[index] = None
    last_end = -1
    for index in range(count - 1, -1, -1):
        candidate = decoded[index]
        if candidate is not None and candidate.type == "turn/end":
            last_end = index
            break
    kept = count
    for index, item in enumerate(decoded):
        if item is None:
            if index <= last_end:
                at, extra = position(first + index)
                raise corrupt(where + extra, f"unparsable committed event at {at}")
            kept = index
            break
        if item.seq != first + index:
            if index <= last_end:
                at, extra = position(first + index)
                raise corrupt(
                    where + extra,
                    f"seq gap in committed region at {at} "
                    f"(expected {first + index}, got {item.seq})",
                )
            kept = index
            break
    if kept == count:
        return decoded  # type: ignore[return-value]  # no None left
    return decoded[:kept]  # type: ignore[return-value]


def restore_log(
    session_id: str,
    header: Mapping[str, Any],
    events: list[Event],
    where: str,
    *,
    repair: bool,
    position: Position | None = None,
    base: Session | None = None,
) -> tuple[Session, list[Event]]:
    """Validate a scanned prefix as a session (surface rules) and compute its crash closers.

    Returns the live session (closers included when ``repair``) and the closers. A failure is
    :class:`CorruptSessionLog` (``corrupt session log: invalid event at <position(i)>: <reason>
    (<where>)``); nothing is written here. With ``base`` (a session resumed from a fold
    snapshot whose events end at a ``turn/end``), ``events`` are the ones after it and are
    added to it.
    """
    closers: list[Event] = []
    if repair:
        try:
            closers = interrupted_turn_closers(events)
        except (AttributeError, TypeError, KeyError) as exc:
            raise corrupt(where, f"cannot close the interrupted turn ({exc})") from None
    try:
        if base is None:
            session = Session.restore(
                session_id, events + closers if closers else events, header=header
            )
        else:
            session = base
            session.extend(events + closers if closers else events)
    except (InvalidEventError, TypeError, KeyError, AttributeError, ValueError) as exc:
        reason = str(exc)
        found = _SEED_ERROR.match(reason)
        if found is not None and position is not None:
            at, extra = position(int(found.group(1)))
            reason, where = f"invalid event at {at}: {found.group(2)}", where + extra
        raise corrupt(where, reason) from None
    return session, closers


_SEED_ERROR = re.compile(r"invalid seed event at index (\d+): (.*)", re.DOTALL)


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
