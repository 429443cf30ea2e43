"""Events held as raw, already validated lines, and the read-only view of a session's log.

Owns :class:`RawEvents` (the lines of a log prefix a store checked, decoded on first access)
and :class:`EventLog` (``Session.events``: the raw log in seq order, resolving lazy events).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import Protocol, overload

import msgspec

from dsh.session.event import Event, decode_event


class _LazySource(Protocol):
    """What an :class:`EventLog` needs of its session (``dsh.session.log.Session``): kept as a
    protocol so this module does not import the one that imports it."""

    @property
    def _raw(self) -> object: ...

    def _event(self, index: int) -> Event: ...

    def _resolve_all(self) -> None: ...

__all__ = ["EventLog", "RawEvents"]

_LINES_DECODER = msgspec.json.Decoder(Event)


class RawEvents:
    """Validated event lines not decoded yet, held as a few large byte strings.

    ``starts[i]`` is where line ``i`` starts in the log (``starts[-1]`` is where the last one
    ends, plus its newline). The log's bytes are ``chunks``: chunk ``k`` holds lines
    ``k * per`` up to ``(k + 1) * per`` and starts at log offset ``starts[k * per]`` (a JSONL
    store passes the whole file as one chunk starting at 0 and ``per`` past the end).

    A store builds it over bytes it has already checked (a fold snapshot's prefix), so decoding
    a line here cannot fail on anything the load contract checks.
    """

    __slots__ = ("bases", "chunks", "per", "starts")

    def __init__(
        self,
        chunks: list[bytes],
        starts: array[int],
        *,
        per: int | None = None,
        bases: list[int] | None = None,
    ) -> None:
        self.chunks = chunks
        self.starts = starts
        self.per = per if per is not None else len(starts)
        self.bases = bases if bases is not None else [0]

    def __len__(self) -> int:
        return len(self.starts) - 1

    def decode(self, index: int) -> Event:
        starts = self.starts
        chunk = index // self.per
        base = self.bases[chunk]
        return decode_event(self.chunks[chunk][starts[index] - base : starts[index + 1] - 1 - base])

    def decode_all(self) -> list[Event]:
        """Every line, decoded chunk by chunk in one call each (what a full scan costs)."""
        starts, per, count = self.starts, self.per, len(self)
        out: list[Event] = []
        for chunk, (data, base) in enumerate(zip(self.chunks, self.bases, strict=True)):
            low, high = chunk * per, min((chunk + 1) * per, count)
            if low >= high:
                break
            view = memoryview(data)[starts[low] - base : starts[high] - base]
            out.extend(_LINES_DECODER.decode_lines(view))
        for index, event in enumerate(out):
            if event.surface_op is not None and event.source_event_seqs is not None:
                out[index] = self.decode(index)  # restores the line's key order
        return out


class EventLog(Sequence[Event]):
    """Read-only view of the raw log in seq order."""

    __slots__ = ("_events", "_session")

    def __init__(self, events: list[Event], session: _LazySource | None = None) -> None:
        self._events = events
        self._session: _LazySource | None = session if session is not None and session._raw is not None else None

    def __len__(self) -> int:
        return len(self._events)

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        if self._session is None:
            return self._events[index]
        if isinstance(index, slice):
            return [self._session._event(i) for i in range(*index.indices(len(self._events)))]
        if index < 0:
            index += len(self._events)
            if index < 0:
                raise IndexError("event index out of range")
        elif index >= len(self._events):
            raise IndexError("event index out of range")
        return self._session._event(index)

    def __iter__(self) -> Iterator[Event]:
        if self._session is not None:
            # A full forward walk (an index being built, a listing) costs what a batch decode
            # costs; one line at a time would cost three times that.
            self._session._resolve_all()
            self._session = None
        return iter(self._events)

    def __reversed__(self) -> Iterator[Event]:
        if self._session is None:
            return reversed(self._events)
        return map(self._session._event, range(len(self._events) - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EventLog):
            return list(self) == list(other)
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]
