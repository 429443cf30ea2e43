"""The schedule state is the log: decoding ``schedule/change`` events and folding them.

Owns the durable shapes (``{version: 1, operation: create|delete|dispatch, ...}`` with the
reference's records ``after``/``at``/``every``), the strict decoder (unknown versions, extra or
missing fields, non-canonical instants, reused ids, and delete or dispatch of an inactive id are
corruption, never half-applied), the fold over the events after a fork's seed, fixed-rate
arithmetic (a dispatch accepted at ``t`` moves the reminder to the first creation-aligned target
after ``t``: missed occurrences are skipped, never replayed), and the due decision the live owner
and the worker share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from dsh._js import is_safe_integer
from dsh.plugins.schedule.timespec import (
    MAX_MS,
    MIN_EVERY_SECONDS,
    MIN_MS,
    format_instant,
    parse_canonical,
)
from dsh.session import Event, Session
from dsh.session.vocab import JsonObject

EVENT_TYPE: Final = "schedule/change"
VERSION: Final = 1
Kind = Literal["after", "at", "every"]


class ScheduleLogError(ValueError):
    """A ``schedule/change`` that cannot be trusted; ``seq`` is the offending event's."""

    code = "corrupt_schedule_log"

    def __init__(self, detail: str, seq: int | None = None) -> None:
        super().__init__(detail if seq is None else f"{detail} (event seq {seq})")
        self.detail = detail
        self.seq = seq


@dataclass(frozen=True, slots=True)
class Record:
    """One active reminder. ``seconds`` is ``afterSeconds`` or ``everySeconds`` (``None`` for
    ``at``); ``scheduled_at`` is epoch ms (for ``every``: the next occurrence not yet dispatched)."""

    id: str
    kind: Kind
    prompt: str
    scheduled_at: int
    seconds: int | None = None

    def to_json(self) -> JsonObject:
        """The durable record, keys in the reference's order."""
        out: JsonObject = {"id": self.id, "kind": self.kind, "prompt": self.prompt}
        if self.kind == "after":
            out["afterSeconds"] = self.seconds
        elif self.kind == "every":
            out["everySeconds"] = self.seconds
        out["scheduledAt"] = format_instant(self.scheduled_at)
        return out

    def view(self, now: int) -> JsonObject:
        """What the tools show: the record plus ``state`` and ``deliveryMode``."""
        out = self.to_json()
        out["state"] = "overdue" if now >= self.scheduled_at else "scheduled"
        out["deliveryMode"] = "session-local"
        return out


@dataclass(frozen=True, slots=True)
class Change:
    operation: Literal["create", "delete", "dispatch"]
    id: str
    record: Record | None = None
    accepted_at: int | None = None


@dataclass(slots=True)
class Folded:
    """Active records in creation order, every id ever used, the latest recurring batch."""

    active: dict[str, Record] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    last_batch_at: int | None = None

    def next_id(self) -> str:
        n = len(self.seen) + 1
        while f"schedule-{n}" in self.seen:
            n += 1
        return f"schedule-{n}"


# -- decoding --------------------------------------------------------------------------------


def _exact(value: Mapping[str, object], keys: Iterable[str]) -> bool:
    return set(value) == set(keys)


def _id(value: object) -> str:
    if type(value) is not str or not value or value.strip() != value:
        raise ScheduleLogError("schedule id must be a non-empty string without surrounding whitespace")
    return value


def _instant(value: object, what: str) -> int:
    ms = parse_canonical(value)
    if ms is None:
        raise ScheduleLogError(f"{what} must be a canonical four-digit-year RFC 3339 UTC instant")
    return ms


def _prompt(value: object) -> str:
    if type(value) is not str or not value or value.strip() != value:
        raise ScheduleLogError("schedule prompt must be non-empty and already trimmed")
    return value


def decode_record(value: object) -> Record:
    if type(value) is not dict:
        raise ScheduleLogError("schedule record must be an object")
    kind = value.get("kind")
    if kind == "after":
        if not _exact(value, ("id", "kind", "prompt", "afterSeconds", "scheduledAt")):
            raise ScheduleLogError("after schedule must contain exactly id, kind, prompt, afterSeconds, and scheduledAt")
        seconds = value["afterSeconds"]
        if not is_safe_integer(seconds) or seconds <= 0:
            raise ScheduleLogError("afterSeconds must be a positive safe integer")
        return Record(_id(value["id"]), "after", _prompt(value["prompt"]), _instant(value["scheduledAt"], "scheduledAt"), int(seconds))
    if kind == "at":
        if not _exact(value, ("id", "kind", "prompt", "scheduledAt")):
            raise ScheduleLogError("at schedule must contain exactly id, kind, prompt, and scheduledAt")
        return Record(_id(value["id"]), "at", _prompt(value["prompt"]), _instant(value["scheduledAt"], "scheduledAt"))
    if kind == "every":
        if not _exact(value, ("id", "kind", "prompt", "everySeconds", "scheduledAt")):
            raise ScheduleLogError("every schedule must contain exactly id, kind, prompt, everySeconds, and scheduledAt")
        seconds = value["everySeconds"]
        if not is_safe_integer(seconds) or seconds < MIN_EVERY_SECONDS:
            raise ScheduleLogError(f"everySeconds must be a safe integer of at least {MIN_EVERY_SECONDS}")
        return Record(_id(value["id"]), "every", _prompt(value["prompt"]), _instant(value["scheduledAt"], "scheduledAt"), int(seconds))
    raise ScheduleLogError('v1 schedule kind must be "after", "at", or "every"')


def decode_change(data: object) -> Change:
    """One strict version-1 ``schedule/change`` payload."""
    if type(data) is not dict:
        raise ScheduleLogError("schedule/change payload must be an object")
    version = data.get("version")
    if type(version) is not int or version != VERSION:
        raise ScheduleLogError("schedule/change version must be 1")
    operation = data.get("operation")
    if operation == "create":
        if not _exact(data, ("version", "operation", "schedule")):
            raise ScheduleLogError("schedule create must contain exactly version, operation, and schedule")
        record = decode_record(data["schedule"])
        return Change("create", record.id, record=record)
    if operation == "delete":
        if not _exact(data, ("version", "operation", "id")):
            raise ScheduleLogError("schedule delete must contain exactly version, operation, and id")
        return Change("delete", _id(data["id"]))
    if operation == "dispatch":
        if _exact(data, ("version", "operation", "id")):
            return Change("dispatch", _id(data["id"]))
        if _exact(data, ("version", "operation", "id", "acceptedAt")):
            return Change("dispatch", _id(data["id"]), accepted_at=_instant(data["acceptedAt"], "acceptedAt"))
        raise ScheduleLogError("schedule dispatch has an unsupported field combination")
    raise ScheduleLogError("schedule/change operation must be create, delete, or dispatch")


# -- fixed-rate arithmetic -------------------------------------------------------------------


def every_occurrence(record: Record, accepted_at: int) -> tuple[int, int | None]:
    """The latest creation-aligned occurrence at or before ``accepted_at`` and the first one
    after it (``None`` past year 9999). Never enumerates the missed occurrences."""
    assert record.seconds is not None
    interval = record.seconds * 1000
    if accepted_at < record.scheduled_at:
        raise ScheduleLogError("every dispatch cannot precede the active scheduledAt")
    occurrence = record.scheduled_at + (accepted_at - record.scheduled_at) // interval * interval
    following = occurrence + interval
    return occurrence, (following if following <= MAX_MS else None)


# -- the fold --------------------------------------------------------------------------------


def apply_change(state: Folded, change: Change, seq: int | None = None) -> None:
    """Apply one decoded change; a transition the rules forbid raises :class:`ScheduleLogError`."""
    try:
        _apply(state, change)
    except ScheduleLogError as exc:
        if exc.seq is None and seq is not None:
            raise ScheduleLogError(exc.detail, seq) from None
        raise


def _apply(state: Folded, change: Change) -> None:
    if change.operation == "create":
        assert change.record is not None
        if change.id in state.seen:
            raise ScheduleLogError(f'schedule id "{change.id}" was reused')
        state.seen.add(change.id)
        state.active[change.id] = change.record
        return
    record = state.active.get(change.id)
    if record is None:
        raise ScheduleLogError(f'schedule {change.operation} targets inactive id "{change.id}"')
    if change.operation == "delete":
        del state.active[change.id]
        return
    if record.kind != "every":
        if change.accepted_at is not None:
            raise ScheduleLogError("one-shot dispatch must not contain acceptedAt")
        del state.active[change.id]
        return
    accepted = change.accepted_at
    if accepted is None:
        raise ScheduleLogError("every dispatch must contain acceptedAt")
    previous = state.last_batch_at
    if previous is not None and accepted != previous and accepted - previous < MIN_EVERY_SECONDS * 1000:
        raise ScheduleLogError(f"recurring batches must remain at least {MIN_EVERY_SECONDS} seconds apart")
    state.last_batch_at = accepted
    _, following = every_occurrence(record, accepted)
    if following is None:
        del state.active[change.id]
    else:
        state.active[change.id] = replace(record, scheduled_at=following)


def fold(events: Sequence[Event], seed_length: int = 0) -> Folded:
    """Replay every ``schedule/change`` after the fork seed (a fork inherits no reminders)."""
    state = Folded()
    for event in events[seed_length:] if seed_length else events:
        if event.type == EVENT_TYPE:
            try:
                change = decode_change(event.data)
            except ScheduleLogError as exc:
                raise ScheduleLogError(exc.detail, event.seq) from None
            apply_change(state, change, event.seq)
    if state.last_batch_at is not None and state.last_batch_at + MIN_EVERY_SECONDS * 1000 > MAX_MS:
        # No later batch could ever be admitted: such reminders can never fire again.
        for key in [k for k, r in state.active.items() if r.kind == "every"]:
            del state.active[key]
    return state


class ChangeIndex:
    """The session's ``schedule/change`` events, kept as they are committed (a session index),
    so folding a live session costs the schedule events, not the whole log."""

    __slots__ = ("changes",)

    def __init__(self) -> None:
        self.changes: list[Event] = []

    def observe(self, event: Event) -> None:
        if event.type == EVENT_TYPE:
            self.changes.append(event)


def fold_session(session: Session) -> Folded:
    """:func:`fold` over a live session, through its :class:`ChangeIndex`."""
    index: ChangeIndex = session.attach_index(ChangeIndex, ChangeIndex)
    seed = seed_length(session.header)
    return fold([e for e in index.changes if e.seq >= seed] if seed else index.changes)


def seed_length(header: Mapping[str, object]) -> int:
    value = header.get("seedLength")
    return value if type(value) is int and value >= 0 else 0


# -- what is due -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OneShot:
    record: Record


@dataclass(frozen=True, slots=True)
class BatchItem:
    record: Record
    occurrence_at: int


@dataclass(frozen=True, slots=True)
class Batch:
    items: tuple[BatchItem, ...]
    accepted_at: int


@dataclass(frozen=True, slots=True)
class Wait:
    until: int | None


Decision = OneShot | Batch | Wait


def decide(state: Folded, now: int) -> Decision:
    """The next delivery at ``now``: the earliest due one-shot first (ties in creation order),
    else every due fixed-rate reminder in one batch (at least 300 s after the previous batch),
    else when to look again."""
    order = {key: index for index, key in enumerate(state.active)}
    records = list(state.active.values())
    one_shots = sorted(
        (r for r in records if r.kind != "every" and r.scheduled_at <= now),
        key=lambda r: (r.scheduled_at, order[r.id]),
    )
    if one_shots:
        return OneShot(one_shots[0])
    recurring = sorted(
        (r for r in records if r.kind == "every" and r.scheduled_at <= now),
        key=lambda r: (r.scheduled_at, order[r.id]),
    )
    gate = MIN_MS if state.last_batch_at is None else state.last_batch_at + MIN_EVERY_SECONDS * 1000
    if recurring and now >= gate:
        items = tuple(BatchItem(r, every_occurrence(r, now)[0]) for r in recurring)
        return Batch(items, now)
    future = [r.scheduled_at for r in records if r.scheduled_at > now and not (recurring and r.kind == "every")]
    if recurring:
        future.append(gate)
    return Wait(min(future) if future else None)


def dispatch_payloads(decision: OneShot | Batch) -> list[JsonObject]:
    """The ``schedule/change`` dispatch events that record a delivery."""
    if isinstance(decision, OneShot):
        return [{"version": VERSION, "operation": "dispatch", "id": decision.record.id}]
    accepted = format_instant(decision.accepted_at)
    return [
        {"version": VERSION, "operation": "dispatch", "id": item.record.id, "acceptedAt": accepted}
        for item in decision.items
    ]
