"""The per-session index: what the listener needs from a raw log, kept current event by event.

It answers the reference's backward scans in constant time (the latest reading, the latest
model-visible message, this turn's preceding reading) and two of this plugin's own: the latest
model-visible message before this turn's ``turn/start`` (``stepOneBaseline: previousExchange``)
and the zones the open turn's prompts carry (:mod:`.request_zone`).
"""

from __future__ import annotations

from collections.abc import Sequence

from dsh.plugins.time_context.request_zone import MESSAGE_TYPES, source_zone
from dsh.session import SURFACE_TYPES, Event, Session

__all__ = ["ReadingIndex", "is_reading", "reading_index"]


def is_reading(event: Event) -> bool:
    """Whether ``event`` is a time-context reading (by its source; shadowed or not)."""
    if event.type != "context/message" or type(event.data) is not dict:
        return False
    source = event.data.get("source")
    return (
        type(source) is dict
        and source.get("kind") == "plugin"
        and source.get("plugin") == "time-context"
    )


def _turn_of(event: Event) -> int | float | None:
    data = event.data
    turn = data.get("turn") if type(data) is dict else None
    return turn if type(turn) is int or type(turn) is float else None


class ReadingIndex:
    """What the plugin needs from a raw log, kept current event by event."""

    __slots__ = (
        "before_turn_time",
        "last_message_time",
        "last_reading_seq",
        "last_reading_time",
        "open_turn",
        "open_zones",
        "turn_start_seq",
    )

    def __init__(self) -> None:
        self.last_message_time: int | None = None
        self.last_reading_time: int | None = None
        self.last_reading_seq = -1
        # Latest ``turn/start`` seq per turn number. Keyed by number: 1.0 finds 1, as JS ``===``
        # does; a boolean, string or missing ``turn`` can never equal the listener's integer.
        self.turn_start_seq: dict[float, int] = {}
        # Per turn number: the latest model-visible message time before its latest turn/start.
        self.before_turn_time: dict[float, int | None] = {}
        # The number of the latest turn/start, and the zones prompts carried since it.
        self.open_turn: float | None = None
        self.open_zones: set[str] = set()

    def observe(self, event: Event) -> None:
        kind = event.type
        if kind in SURFACE_TYPES:  # the model-visible message types
            self.last_message_time = event.time
            if kind == "context/message" and is_reading(event):
                self.last_reading_time = event.time
                self.last_reading_seq = event.seq
            elif kind in MESSAGE_TYPES and type(event.data) is dict:
                zone = source_zone(event.data.get("source"))
                if zone is not None:
                    self.open_zones.add(zone)
        elif kind == "turn/start":
            turn = _turn_of(event)
            if turn is not None:
                self.turn_start_seq[turn] = event.seq
                self.before_turn_time[turn] = self.last_message_time
            self.open_turn = turn
            self.open_zones = set()

    def reading_in_turn(self, turn: int) -> int | None:
        """The reference's backward scan: the newest reading unless ``turn/start {turn}`` comes
        first (a missing ``turn/start`` lets an older turn's reading through, as there)."""
        if self.last_reading_seq > self.turn_start_seq.get(turn, -1):
            return self.last_reading_time
        return None

    def previous_exchange(self, turn: int) -> int | None:
        """The latest model-visible message before this turn's (latest) ``turn/start``; ``None``
        for a session's first turn, or when the turn has no ``turn/start``."""
        return self.before_turn_time.get(turn)

    def zones_in_turn(self, turn: int, events: Sequence[Event]) -> set[str]:
        """The (unchecked) zones of the prompts after the latest ``turn/start {turn}``, as the
        reference collects them; from the index when that is the latest turn/start (always, in
        a log the loop wrote), else by a scan."""
        if self.open_turn == turn:
            return set(self.open_zones)
        found: set[str] = set()
        for event in reversed(events):
            if event.type == "turn/start" and _turn_of(event) == turn:
                return found
            if event.type in MESSAGE_TYPES and type(event.data) is dict:
                zone = source_zone(event.data.get("source"))
                if zone is not None:
                    found.add(zone)
        return set()  # no turn/start for this turn: the reference collects nothing either


def reading_index(session: Session) -> ReadingIndex:
    index: ReadingIndex = session.attach_index(ReadingIndex, ReadingIndex)
    return index
