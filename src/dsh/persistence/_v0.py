"""The v0 session-log line format, shared by every store (docs/format-v0.md, docs/stores.md).

Owns the header line (:func:`make_header`, :func:`header_line`, :func:`parse_header`,
:func:`check_header`), the checked encoding of event lines (:func:`encode_event_lines`), and the
committed-region scan with the reference's corruption texts (:func:`scan_event_lines`, and
:func:`scan_lazily` for a whole log kept partly as its lines; :func:`restore_log`). The JSONL file, the SQLite ``line`` column and the PostgreSQL ``line``
column hold exactly these bytes, so every backend accepts, refuses and repairs the same logs.
"""

from __future__ import annotations

import gc
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import msgspec

from dsh import _json
from dsh.persistence._fold import line_starts
from dsh.persistence._lines import Kept, LazyLines, decode_lazily, decode_or_none
from dsh.persistence._paths import encode_session_id
from dsh.persistence.base import (
    AppendSeqMismatch,
    CorruptSessionLog,
    InvalidSessionId,
    UnsupportedVersion,
)
from dsh.session import Event, InvalidEventError, Session, encode_event, interrupted_turn_closers
from dsh.session.event import check_surface_fields, check_vocabulary, restore_key_order
from dsh.session.raw import RawEvents

__all__ = [
    "Position",
    "check_header",
    "check_row_keys",
    "corrupt",
    "encode_event_lines",
    "file_line",
    "gc_paused",
    "header_line",
    "make_header",
    "parse_header",
    "parse_log",
    "restore_log",
    "row_number",
    "scan_event_lines",
    "scan_lazily",
    "split_header",
]

_HEADER_OPTIONALS = (("cwd", str), ("parentSession", str), ("seedLength", int))
_EVENT_DECODER = msgspec.json.Decoder(Event)
_SEQ_OF = operator.attrgetter("seq")


# -- header ----------------------------------------------------------------------------------


def make_header(header: Mapping[str, object]) -> dict[str, Any]:
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


def header_line(header: Mapping[str, object]) -> bytes:
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


def check_header(header: Mapping[str, object], session_id: str, where: str) -> None:
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
            _json.may_hold_negative_zero(line)
            and not (
                _json.is_lossless(event.data)
                and _json.is_lossless(event.surface_op)
                and _json.is_lossless(event.source_event_seqs)
            )
        )
    ):
        raise not_json
    return line


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


Position = Callable[[int], tuple[str, str]]
"""Where event ``i`` is: the reference's wording (``line i+1``, ``row i+1``) and an extra locator."""


def file_line(index: int) -> tuple[str, str]:
    """Event ``index`` of a JSONL file is "line index+1" as the reference counts (event lines
    only), and line ``index+2`` of the file (the header is line 1)."""
    return f"line {index + 1}", f", file line {index + 2}"


def row_number(index: int) -> tuple[str, str]:
    """Event ``index`` of a database store is its 1-based row in seq order (row n holds seq n-1)."""
    return f"row {index + 1}", ""


def corrupt(where: str, detail: str) -> CorruptSessionLog:
    """``corrupt session log: <detail> (<where>)``: the reference's text, then the location."""
    return CorruptSessionLog(f"corrupt session log: {detail} ({where})")


def split_header(raw: bytes, where: str) -> tuple[dict[str, Any], int]:
    """The parsed header line of a whole log and where the event lines start."""
    header_end = raw.find(b"\n") + 1
    if not header_end:
        raise CorruptSessionLog(f"empty or header-less session log: {where}")
    return parse_header(raw[: header_end - 1], where), header_end


def check_row_keys(
    keys: Sequence[tuple[int, object]], seqs: Sequence[int], where: str, first: int = 0
) -> None:
    """Refuse a database row whose seq column disagrees with the seq its line holds.

    ``keys`` are the rows (seq first) whose lines hold ``seqs`` (a scan keeps only lines whose
    seq is their index), from index ``first`` on."""
    for index, seq in enumerate(seqs):
        if keys[index][0] != seq:
            raise corrupt(
                where,
                f"row {first + index + 1} is keyed seq {keys[index][0]} "
                f"but its line holds seq {seq}",
            )


def scan_event_lines(
    lines: Sequence[bytes],
    where: str,
    position: Position,
    *,
    blob: bytes | None = None,
    first: int = 0,
) -> list[Event]:
    """Decode event lines and return the preserved prefix (docs/stores.md, "Loading").

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
    haystack = blob if blob is not None else b"\n".join(lines)
    try:
        decoded = list(map(_EVENT_DECODER.decode, lines))
    except Exception:
        decoded = [decode_or_none(line) for line in lines]
    for index, event in enumerate(decoded):
        if type(event) is Event and (
            event.surface_first
            or (event.surface_op is not None and event.source_event_seqs is not None)
        ):
            try:
                decoded[index] = restore_key_order(event, lines[index])
            except msgspec.ValidationError:  # a line spelling out "surface_first"
                decoded[index] = None
    if _json.may_hold_negative_zero(haystack):
        for index, line in enumerate(lines):
            if (
                decoded[index] is not None
                and _json.may_hold_negative_zero(line)
                and _json.has_negative_zero(line)
            ):
                decoded[index] = None
    last_end = -1
    for index in range(count - 1, -1, -1):
        candidate = decoded[index]
        if candidate is not None and candidate.type == "turn/end":
            last_end = index
            break
    kept = count
    # The usual log: every line parsed and numbered in order (two C-level passes).
    if None not in decoded and list(map(_SEQ_OF, decoded)) == list(range(first, first + count)):
        return decoded  # type: ignore[return-value]  # no None left
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


def scan_lazily(blob: bytes, begin: int, end: int, where: str, position: Position) -> LazyLines:
    """:func:`scan_event_lines` of a whole log (the event lines are ``blob[begin:end]``, each
    with its newline), keeping the events the fold never reads (see
    :data:`~dsh.persistence._lines.LAZY_TYPES`) as their lines: each was checked exactly as a
    full decode checks it (JSON syntax, every envelope type, no unknown key) but its ``data``
    was not built, and a :class:`~dsh.persistence._lines.Kept` item stands for it. The caller
    keeps the lines and decodes them on first access. A log whose every line decodes, in seq
    order, takes that path (:func:`~dsh.persistence._lines.decode_lazily`); any other is
    scanned as :func:`scan_event_lines` scans it (same errors, same torn tail) and comes back
    fully decoded.
    """
    found = decode_lazily(blob, begin, end)
    if found is not None:
        return found
    lines = blob[begin:end].split(b"\n")
    lines.pop()
    events: list[Any] = scan_event_lines(lines, where, position, blob=blob)
    starts = line_starts(begin, lines[: len(events)])
    return LazyLines(events, list(range(len(events))), [], starts)


def restore_log(
    session_id: str,
    header: Mapping[str, object],
    events: list[Event],
    where: str,
    *,
    repair: bool,
    position: Position | None = None,
    base: Session | None = None,
    raw: RawEvents | None = None,
    lazy: LazyLines | None = None,
) -> tuple[Session, list[Event]]:
    """Validate a scanned prefix as a session (surface rules) and compute its crash closers.

    Returns the live session (closers included when ``repair``) and the closers. A failure is
    :class:`CorruptSessionLog` (``corrupt session log: invalid event at <position(i)>: <reason>
    (<where>)``); nothing is written here. With ``base`` (a session resumed from a fold
    snapshot whose events end at a ``turn/end``), ``events`` are the ones after it and are
    added to it. With ``lazy`` (what :func:`scan_lazily` found) and ``raw`` (the lines of the
    whole log), ``events`` are ``lazy.items`` and the envelopes among them are decoded from
    ``raw`` on first access.
    """
    closers: list[Event] = []
    if repair:
        try:
            closers = interrupted_turn_closers(
                events if raw is None else _last_turn(events, raw)
            )
        except (AttributeError, TypeError, KeyError) as exc:
            raise corrupt(where, f"cannot close the interrupted turn ({exc})") from None
    try:
        if base is None and raw is not None and lazy is not None:
            session = Session.from_scan(
                session_id, events, raw, header=header, decoded=lazy.decoded, ends=lazy.ends
            )
            session.extend(closers)
        elif base is None:
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


def _last_turn(items: Sequence[Event | Kept], raw: RawEvents) -> list[Event]:
    """The events from the last turn boundary on, decoded (all a crash closer looks at: a
    ``turn/start`` or ``turn/end`` resets everything before it)."""
    start = 0
    for index in range(len(items) - 1, -1, -1):
        if items[index].type in ("turn/start", "turn/end"):
            start = index
            break
    return [
        item if type(item) is Event else raw.decode(index)
        for index, item in enumerate(items[start:], start)
    ]


_SEED_ERROR = re.compile(r"invalid seed event at index (\d+): (.*)", re.DOTALL)


def parse_log(raw: bytes, where: str) -> tuple[dict[str, Any], list[Event]]:
    """The header and committed events of a whole JSONL v0 log held in memory (an exported
    file), checked as a read checks it: the reference's corruption texts, the torn tail
    dropped, nothing repaired."""
    header, header_end = split_header(raw, where)
    session_id = header["id"]
    check_header(header, session_id, where)
    lines = raw[header_end:].split(b"\n")
    lines.pop()  # after the last newline: empty, or a torn line
    with gc_paused():
        events = scan_event_lines(lines, where, file_line, blob=raw)
        restore_log(session_id, header, events, where, repair=False, position=file_line)
    return header, events
