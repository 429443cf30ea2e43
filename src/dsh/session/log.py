"""The live session: an append-only event log, its surface, and its derived messages.

Owns :class:`Session`: validation of appends and seeds, the surface fold (append and positional
replace), the incremental derived-message cache, turn bookkeeping, observers, and incremental
indexes that plugins attach. The append path never does I/O; persistence buffers events from
observers and writes on flush.

A session a store resumed from a fold snapshot (:meth:`Session.from_fold`) holds the events of
the snapshot's prefix as their raw, already validated lines (:class:`RawEvents`) and decodes
each one on first access; every reader (``events``, indexes, replaces) sees the same values as
an eagerly decoded log.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, Final, Protocol, TypeVar

from dsh import _json
from dsh._clock import now_ms
from dsh.session.derive import DerivedMessages, Message, project
from dsh.session.event import (
    SURFACE_TYPES,
    VOCABULARY_TYPES,
    Event,
    InvalidEventError,
    canonical_surface_op,
    check_surface_fields,
    check_vocabulary,
    provenance_is_valid,
)
from dsh.session.raw import EventLog, RawEvents
from dsh.session.seed import SESSION_FORMAT_VERSION, make_header, seed_event

log = logging.getLogger("dsh.session")

__all__ = ["SESSION_FORMAT_VERSION", "Observer", "Session", "SessionIndex"]

_APPEND: Final = "append"
_SPECIAL_TYPES: Final = SURFACE_TYPES | VOCABULARY_TYPES | {"turn/start", "turn/end"}
"""Types an append checks or folds beyond the envelope; any other is only logged."""

Observer = Callable[["Session", Event], object]


class SessionIndex(Protocol):
    """An incremental index over a session's raw log, fed every event in seq order."""

    def observe(self, event: Event) -> None: ...


IndexT = TypeVar("IndexT", bound=SessionIndex)


class Session:
    """A live session. ``events`` seeds it from a replayed log without notifying observers."""

    def __init__(
        self,
        id: str,
        events: Iterable[Event | Mapping[str, Any]] = (),
        *,
        header: Mapping[str, Any] | None = None,
    ) -> None:
        if type(id) is not str or not id:
            raise ValueError("session id must be a non-empty string")
        self.id = id
        self.header: dict[str, Any] = make_header(id, header)
        self._events: list[Event] = []
        self._raw: RawEvents | None = None  # lines of events held as ``None`` in ``_events``
        self._nodes: list[int] = []  # surface: seqs in order
        self._positions: dict[int, int] = {}  # seq -> index in _nodes
        self._messages: list[Message] = []  # derived messages of the current generation
        self._replace_generation = 0
        self._last_turn = 0
        self._open_turn: int | None = None
        self._observers: list[Observer] = []
        self._indexes: dict[object, SessionIndex] = {}
        self._broken_indexes: list[object] = []
        self._publishing = False
        for index, item in enumerate(events):
            try:
                event = seed_event(item, index)
                self._check_transition(event.type, event.seq, event.surface_op, event.source_event_seqs)
            except (InvalidEventError, TypeError, KeyError) as exc:
                raise _seed_error(index, exc) from None
            self._commit(event)

    @classmethod
    def restore(
        cls, id: str, events: list[Event], *, header: Mapping[str, Any] | None = None
    ) -> Session:
        """Seed from events a store decoded from durable JSON (typed by the decoder).

        Runs the same envelope and surface checks as a seed but skips the deep lossless-JSON
        walk: data parsed from JSON text is JSON by construction (the store rejects ``-0``).
        """
        session = cls(id, header=header)
        session.extend(events)
        return session

    @classmethod
    def from_fold(
        cls,
        id: str,
        raw: RawEvents,
        *,
        header: Mapping[str, Any] | None,
        surface: list[int],
        messages: list[Message],
        replace_generation: int,
        last_turn: int,
        open_turn: int | None,
    ) -> Session:
        """A session whose first ``len(raw)`` events a store validated and folded before.

        ``surface`` .. ``open_turn`` are the fold of exactly those events (a snapshot the store
        checked against the bytes of ``raw``); the events themselves are decoded on first
        access. Later events are added with :meth:`extend`, checked as usual.
        """
        session = cls(id, header=header)
        session._events = [None] * len(raw)  # type: ignore[list-item]  # resolved by _event
        session._raw = raw
        session._nodes = surface
        session._positions = {seq: pos for pos, seq in enumerate(surface)}
        session._messages = messages
        session._replace_generation = replace_generation
        session._last_turn = last_turn
        session._open_turn = open_turn
        return session

    def fold_state(self) -> tuple[list[int], list[Message], int, int, int | None]:
        """``(surface, messages, replace_generation, last_turn, open_turn)``: what
        :meth:`from_fold` takes back, for a store writing a snapshot."""
        return (
            list(self._nodes),
            list(self._messages),
            self._replace_generation,
            self._last_turn,
            self._open_turn,
        )

    def _resolve_all(self) -> None:
        """Decode every event still held as a raw line, in one pass, and drop the lines."""
        raw = self._raw
        if raw is None:
            return
        events = self._events
        for index, event in enumerate(raw.decode_all()):
            if events[index] is None:
                events[index] = event
        self._raw = None

    def _event(self, index: int) -> Event:
        """Event ``index``, decoding its raw line on first access."""
        event = self._events[index]
        if event is None:
            assert self._raw is not None
            event = self._events[index] = self._raw.decode(index)
        return event

    @classmethod
    def from_scan(
        cls,
        id: str,
        items: Sequence[Any],
        raw: RawEvents,
        *,
        header: Mapping[str, Any] | None,
        decoded: Sequence[int],
        ends: Sequence[int],
    ) -> Session:
        """A session over a whole scanned log: ``items`` are decoded events, or envelopes (an
        object with ``type, seq, time, source_event_seqs, surface_op`` but no data) of
        log-only events whose lines ``raw`` holds and whose data nothing here reads; those are
        decoded on first access.

        ``decoded`` lists the indexes of the decoded events in order, ``ends`` those of the
        ``turn/end`` envelopes. The store vouches that every envelope passes what :meth:`extend`
        checks of it (its seq is its index, its time is not negative, it has neither
        ``surfaceOp`` nor ``sourceEventSeqs``): only the decoded events are checked and folded
        here, as :meth:`extend` does."""
        session = cls(id, header=header)
        session._raw = raw
        session._fold_decoded(items, decoded, ends)
        return session

    def _fold_decoded(self, items: Sequence[Any], decoded: Sequence[int], ends: Sequence[int]) -> None:
        """:meth:`from_scan` over the decoded events only (see there). A ``turn/end`` envelope
        between two of them closes the open turn. An event that plainly passes the checks of
        :meth:`_extend_one` (a surface append with valid provenance, or a log-only event without
        ``surfaceOp``, ``sourceEventSeqs`` or a vocabulary rule) is folded in directly (the
        session is new: there is no index to feed); any other goes through them."""
        events = self._events
        pad = events.extend
        fold_in = self._fold_in
        end, last_end = 0, len(ends)
        surface = SURFACE_TYPES
        ruled = VOCABULARY_TYPES
        for index in decoded:
            if end < last_end and ends[end] < index:
                self._open_turn = None
                end = bisect_left(ends, index, end)
            if len(events) < index:
                pad(repeat(None, index - len(events)))  # type: ignore[arg-type]  # lazy
            event = items[index]
            kind, op, seqs = event.type, event.surface_op, event.source_event_seqs
            if (
                event.seq == index
                and event.time >= 0
                and (
                    (
                        op == "append"
                        and kind in surface
                        and (seqs is None or provenance_is_valid(seqs, index))
                    )
                    or (op is None and seqs is None and kind not in surface and kind not in ruled)
                )
            ):
                fold_in(event)
            else:
                self._extend_one(event, index)
        pad(repeat(None, len(items) - len(events)))  # type: ignore[arg-type]  # lazy
        if end < last_end:
            self._open_turn = None

    def extend(self, events: Iterable[Event]) -> None:
        """Commit events of a replayed log after those already held, without publishing them.

        The checks are :meth:`restore`'s; a failure names the event's index in the log and
        leaves the events before it committed.
        """
        for event in events:
            self._extend_one(event, len(self._events))

    def _extend_one(self, event: Event, index: int) -> None:
        try:
            if event.seq != index:
                raise InvalidEventError(f"seq {event.seq} does not match its index {index}")
            if event.time < 0:
                raise InvalidEventError(f"time {event.time} must be a non-negative integer")
            check_vocabulary(event.type, event.data)
            self._check_transition(event.type, event.seq, event.surface_op, event.source_event_seqs)
        except (InvalidEventError, TypeError, KeyError) as exc:
            raise _seed_error(index, exc) from None
        self._commit(event)

    # -- reading -----------------------------------------------------------------------------

    @property
    def events(self) -> EventLog:
        """The raw log in seq order, shadowed events included."""
        return EventLog(self._events, self)

    @property
    def surface(self) -> tuple[int, ...]:
        """Seqs of the surface nodes, in surface order."""
        return tuple(self._nodes)

    @property
    def replace_generation(self) -> int:
        """How many replaces the surface has seen."""
        return self._replace_generation

    @property
    def last_turn(self) -> int:
        """The number of the latest ``turn/start``, 0 when there is none."""
        return self._last_turn

    @property
    def open_turn(self) -> int | None:
        """The turn whose ``turn/start`` is the latest turn boundary, if any."""
        return self._open_turn

    def derive_messages(self) -> DerivedMessages:
        """The model-visible history, an immutable snapshot. O(1) per call."""
        return DerivedMessages(self._messages, len(self._messages))

    def __len__(self) -> int:
        return len(self._events)

    def __repr__(self) -> str:
        return f"Session({self.id!r}, {len(self._events)} events)"

    # -- writing -----------------------------------------------------------------------------

    def append(
        self,
        type: str,
        data: Mapping[str, Any] | Any,
        *,
        surface_op: str | Mapping[str, Any] | None = None,
        source_event_seqs: Sequence[int] | None = None,
    ) -> Event:
        """Validate, commit and publish one event. Invalid appends raise and log nothing."""
        if self._publishing:
            raise RuntimeError("session append cannot reenter while another append is being published")
        if not isinstance(type, str) or not type:
            raise InvalidEventError("session event type must be a non-empty string")
        seq = len(self._events)
        try:
            snap = _json.lossless_copy(data)
            op = surface_op if surface_op is None or surface_op == "append" else canonical_surface_op(surface_op)
            seqs = None if source_event_seqs is None else list(source_event_seqs)
            # Valid provenance (what the agent loop writes) is plain ints: no JSON round trip.
            proven = seqs is None or provenance_is_valid(seqs, seq)
            if not proven:
                seqs = _json.lossless_copy(seqs)
        except _json.NotLosslessJSON:
            raise TypeError(f'session event "{type}" carries non-JSON-serializable data') from None
        special = type in _SPECIAL_TYPES
        if special and type in VOCABULARY_TYPES:
            check_vocabulary(type, snap)
        # Log-only events without surface fields (chunks, steps: most appends) and surface
        # appends (the literal "append") with valid or no provenance pass every rule unread.
        surface = special and type in SURFACE_TYPES
        if op is not (_APPEND if surface else None) or not (proven if surface else seqs is None):
            self._check_transition(type, seq, op, seqs)
        event = Event(type, seq, now_ms(), snap, seqs, op)
        if special:
            self._fold_in(event)
        else:
            self._events.append(event)  # the rest of the fold ignores this type
        if self._indexes:
            self._observe(event)
        if self._observers:
            self._publish(event)
        return event

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        """Call ``observer(session, event)`` after each commit; returns the unsubscribe."""
        self._observers.append(observer)

        def unsubscribe() -> None:
            if observer in self._observers:
                self._observers.remove(observer)

        return unsubscribe

    def attach_index(self, key: object, factory: Callable[[], IndexT]) -> IndexT:
        """Return the index stored under ``key``, building it from the log on first use.

        An index is fed every committed event in seq order, seeds included, so what it answers
        is a pure function of the raw log.
        """
        existing = self._indexes.get(key)
        if existing is not None:
            return existing  # type: ignore[return-value]
        index = factory()
        for event in self.events:
            index.observe(event)
        self._indexes[key] = index
        return index

    # -- internals ---------------------------------------------------------------------------

    def _check_transition(
        self, type_: str, seq: int, surface_op: Any, source_event_seqs: Any
    ) -> None:
        if seq != len(self._events):
            raise InvalidEventError(f"session event seq {seq} is not contiguous; expected {len(self._events)}")
        check_surface_fields(type_, seq, surface_op, source_event_seqs)
        if type(surface_op) is dict:
            start, end = surface_op["start"], surface_op["end"]
            i = self._positions.get(start)
            if i is None:
                raise InvalidEventError(f"surface replace: start seq {start} not found in surface")
            j = self._positions.get(end)
            if j is None:
                raise InvalidEventError(f"surface replace: end seq {end} not found in surface")
            if i > j:
                raise InvalidEventError(
                    f"surface replace: start seq {start} (index {i}) is after end seq {end} (index {j})"
                )
            covered = set(source_event_seqs or ())
            missing = [s for s in self._nodes[i : j + 1] if s not in covered]
            if missing:
                raise InvalidEventError(
                    "surface replace: sourceEventSeqs must include every shadowed surface node; "
                    f"missing {', '.join(map(str, missing))}"
                )

    def _commit(self, event: Event) -> None:
        self._fold_in(event)
        if self._indexes:
            self._observe(event)

    def _observe(self, event: Event) -> None:
        for key, index in self._indexes.items():
            try:
                index.observe(event)
            except Exception:
                # The event is committed; a faulty index must not stop it being published
                # (and so persisted). Drop the index: it is rebuilt from the log on next use.
                log.exception("session %s: index %r failed on seq %s; dropping it", self.id, key, event.seq)
                self._broken_indexes.append(key)
        while self._broken_indexes:
            self._indexes.pop(self._broken_indexes.pop(), None)

    def _fold_in(self, event: Event) -> None:
        """Add a checked event to the log and the fold (surface, messages, turns)."""
        self._events.append(event)
        kind = event.type
        if kind in SURFACE_TYPES:
            op = event.surface_op
            if op == "append":
                self._positions[event.seq] = len(self._nodes)
                self._nodes.append(event.seq)
                message = project(event)
                if message is not None:
                    self._messages.append(message)
            else:
                assert isinstance(op, dict)
                self._replace(event, op["start"], op["end"])
        elif kind == "turn/start":
            turn = event.data.get("turn") if type(event.data) is dict else None
            if type(turn) is int:
                self._last_turn = turn
                self._open_turn = turn
        elif kind == "turn/end":
            self._open_turn = None

    def _replace(self, event: Event, start: int, end: int) -> None:
        i, j = self._positions[start], self._positions[end]
        self._nodes[i : j + 1] = [event.seq]
        self._positions = {seq: pos for pos, seq in enumerate(self._nodes)}
        self._replace_generation += 1
        # A new backing list, so snapshots handed out earlier keep their contents.
        resolve = self._event
        self._messages = [m for m in (project(resolve(s)) for s in self._nodes) if m is not None]

    def _publish(self, event: Event) -> None:
        self._publishing = True
        try:
            for observer in list(self._observers):
                try:
                    observer(self, event)
                except Exception:
                    log.exception("session %s: observer failed on %s", self.id, event.type)
        finally:
            self._publishing = False


def _seed_error(index: int, exc: BaseException) -> InvalidEventError:
    """The one error for a seed or replayed event that fails a check (KeyError: a data key)."""
    reason = str(exc) if not isinstance(exc, KeyError) else f"missing data key {exc}"
    return InvalidEventError(f"invalid seed event at index {index}: {reason}")
