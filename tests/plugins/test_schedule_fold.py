"""The schedule fold and time rules against naive models of the same rules (hypothesis)."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.plugins.schedule.fold import (
    Batch,
    OneShot,
    Record,
    ScheduleLogError,
    Wait,
    apply_change,
    decide,
    decode_change,
    dispatch_payloads,
    every_occurrence,
    fold,
)
from dsh.plugins.schedule.timespec import (
    MAX_MS,
    MIN_MS,
    ScheduleInputError,
    format_instant,
    parse_at,
    parse_canonical,
    resolve_local,
)
from dsh.session import Event

T0 = 1_783_987_200_000  # 2026-07-14T00:00:00Z
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Asia/Kolkata", "Pacific/Apia"]


def events_of(payloads: list[dict[str, Any]]) -> list[Event]:
    return [Event(type="schedule/change", seq=i, time=T0, data=p) for i, p in enumerate(payloads)]


def create(schedule_id: str, kind: str, at: int, seconds: int | None = None, prompt: str = "p") -> dict[str, Any]:
    record = Record(schedule_id, kind, prompt, at, seconds)  # type: ignore[arg-type]
    return {"version": 1, "operation": "create", "schedule": record.to_json()}


# -- a naive model ---------------------------------------------------------------------------


class Naive:
    """The rules written the slow, obvious way: occurrences enumerated one by one."""

    def __init__(self) -> None:
        self.active: dict[str, dict[str, Any]] = {}
        self.seen: list[str] = []
        self.last_batch: int | None = None

    def apply(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "create":
            _, sid, rkind, at, seconds = op
            if sid in self.seen:
                raise ValueError("reused")
            self.seen.append(sid)
            self.active[sid] = {"kind": rkind, "at": at, "seconds": seconds, "anchor": at}
        elif kind == "delete":
            if op[1] not in self.active:
                raise ValueError("inactive")
            del self.active[op[1]]
        else:
            _, sid, accepted = op
            record = self.active.get(sid)
            if record is None:
                raise ValueError("inactive")
            if record["kind"] != "every":
                if accepted is not None:
                    raise ValueError("one-shot with acceptedAt")
                del self.active[sid]
                return
            if accepted is None or accepted < record["at"]:
                raise ValueError("bad every dispatch")
            if self.last_batch is not None and accepted != self.last_batch and accepted - self.last_batch < 300_000:
                raise ValueError("gate")
            self.last_batch = accepted
            occurrence = record["at"]
            while occurrence + record["seconds"] * 1000 <= accepted:
                occurrence += record["seconds"] * 1000
            record["at"] = occurrence + record["seconds"] * 1000


def to_payload(op: tuple[Any, ...]) -> dict[str, Any]:
    if op[0] == "create":
        return create(op[1], op[2], op[3], op[4])
    if op[0] == "delete":
        return {"version": 1, "operation": "delete", "id": op[1]}
    out: dict[str, Any] = {"version": 1, "operation": "dispatch", "id": op[1]}
    if op[2] is not None:
        out["acceptedAt"] = format_instant(op[2])
    return out


ids = st.sampled_from(["schedule-1", "schedule-2", "schedule-3", "schedule-4"])
offsets = st.integers(min_value=0, max_value=3 * 86_400_000)
ops = st.one_of(
    st.tuples(st.just("create"), ids, st.just("after"), offsets.map(lambda o: T0 + o), st.integers(1, 10_000)),
    st.tuples(st.just("create"), ids, st.just("at"), offsets.map(lambda o: T0 + o), st.none()),
    st.tuples(st.just("create"), ids, st.just("every"), offsets.map(lambda o: T0 + o), st.integers(300, 7_200)),
    st.tuples(st.just("delete"), ids),
    st.tuples(st.just("dispatch"), ids, st.none()),
    st.tuples(st.just("dispatch"), ids, offsets.map(lambda o: T0 + o)),
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.lists(ops, max_size=14))
def test_fold_matches_the_naive_model(sequence: list[tuple[Any, ...]]) -> None:
    naive = Naive()
    naive_error: Exception | None = None
    applied = 0
    for op in sequence:
        try:
            naive.apply(op)
            applied += 1
        except ValueError as exc:
            naive_error = exc
            break
    payloads = [to_payload(op) for op in sequence]
    if naive_error is not None:
        with pytest.raises(ScheduleLogError) as info:
            fold(events_of(payloads))
        assert info.value.seq == applied  # the offending event is named, nothing half-applied
        state = fold(events_of(payloads[:applied]))
    else:
        state = fold(events_of(payloads))
    assert list(state.active) == list(naive.active)
    assert {k: r.scheduled_at for k, r in state.active.items()} == {k: r["at"] for k, r in naive.active.items()}
    assert sorted(state.seen) == sorted(naive.seen)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(300, 86_400),
    st.integers(0, 10**12),
    st.integers(0, 10**6),
)
def test_fixed_rate_delivers_only_the_latest_missed_occurrence(every: int, late: int, created: int) -> None:
    first = T0 + created + every * 1000
    record = Record("schedule-1", "every", "p", first, every)
    now = first + late
    occurrence, following = every_occurrence(record, now)
    assert following is not None
    interval = every * 1000
    # Aligned to the creation time, the latest one due, and the next strictly in the future.
    assert (occurrence - first) % interval == 0 and (following - first) % interval == 0
    assert occurrence <= now < following == occurrence + interval
    state = fold(events_of([create("schedule-1", "every", first, every)]))
    decision = decide(state, now)
    assert isinstance(decision, Batch) and [i.occurrence_at for i in decision.items] == [occurrence]
    for payload in dispatch_payloads(decision):
        apply_change(state, decode_change(payload))
    assert state.active["schedule-1"].scheduled_at == following
    assert isinstance(decide(state, now), Wait)  # exactly one delivery for all missed intervals


def test_due_one_shots_come_first_then_one_batch_with_a_gate() -> None:
    state = fold(events_of([
        create("schedule-1", "every", T0 + 1000, 300),
        create("schedule-2", "after", T0 + 2000, 2),
        create("schedule-3", "every", T0 + 500, 600),
        create("schedule-4", "at", T0 + 2000),
    ]))
    now = T0 + 5000
    first = decide(state, now)
    assert isinstance(first, OneShot) and first.record.id == "schedule-2"  # tie: creation order
    apply_change(state, decode_change(dispatch_payloads(first)[0]))
    second = decide(state, now)
    assert isinstance(second, OneShot) and second.record.id == "schedule-4"
    apply_change(state, decode_change(dispatch_payloads(second)[0]))
    batch = decide(state, now)
    assert isinstance(batch, Batch) and [i.record.id for i in batch.items] == ["schedule-3", "schedule-1"]
    for payload in dispatch_payloads(batch):
        apply_change(state, decode_change(payload))
    # schedule-1 is due again at T0+301s, but the next batch waits 300 s after this one.
    assert decide(state, T0 + 301_000) == Wait(now + 300_000)


@pytest.mark.parametrize(
    "payload",
    [
        {"version": 2, "operation": "delete", "id": "schedule-1"},
        {"version": 1, "operation": "delete", "id": "schedule-1", "extra": 1},
        {"version": 1, "operation": "remove", "id": "schedule-1"},
        {"version": 1, "operation": "create", "schedule": {"id": "schedule-9", "kind": "at", "prompt": "x",
                                                           "scheduledAt": "2026-07-14T00:00:00Z"}},
        {"version": 1, "operation": "create", "schedule": {"id": "schedule-9", "kind": "every", "prompt": "x",
                                                           "everySeconds": 60, "scheduledAt": "2026-07-14T00:00:00.000Z"}},
        {"version": 1, "operation": "create", "schedule": {"id": " s", "kind": "at", "prompt": "x",
                                                           "scheduledAt": "2026-07-14T00:00:00.000Z"}},
        {"version": 1, "operation": "dispatch", "id": "schedule-1", "acceptedAt": "2026-07-14T00:00:00.000Z"},
        "not an object",
    ],
)
def test_malformed_changes_are_refused_with_the_event_named(payload: Any) -> None:
    good = create("schedule-1", "at", T0 + 1000)
    with pytest.raises(ScheduleLogError) as info:
        fold(events_of([good, payload]))
    assert info.value.seq == 1 and "(event seq 1)" in str(info.value)


def test_a_fork_inherits_no_reminders() -> None:
    events = events_of([create("schedule-1", "at", T0 + 1000), create("schedule-2", "every", T0 + 300_000, 300)])
    assert list(fold(events, 2).active) == []
    assert fold(events, 2).next_id() == "schedule-1"
    assert list(fold(events, 1).active) == ["schedule-2"]


# -- instants and zones ----------------------------------------------------------------------


@given(st.integers(MIN_MS, MAX_MS))
def test_canonical_instants_round_trip(ms: int) -> None:
    text = format_instant(ms)
    assert len(text) == 24 and text.endswith("Z")
    assert parse_canonical(text) == ms


def naive_local(local: datetime, zone: zoneinfo.ZoneInfo) -> int | None:
    """Every instant within two days whose local reading is ``local``, minute by minute around
    each offset the zone uses nearby; the earliest, or None in a gap."""
    offsets = set()
    guess = local.replace(tzinfo=UTC)
    for hours in range(-48, 49, 6):
        off = (guess + timedelta(hours=hours)).astimezone(zone).utcoffset()
        assert off is not None
        offsets.add(off)
    found = []
    for off in offsets:
        instant = (local - off).replace(tzinfo=UTC)
        if instant.astimezone(zone).replace(tzinfo=None) == local:
            found.append(int(instant.timestamp() * 1000))
    return min(found) if found else None


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(ZONES),
    st.datetimes(min_value=datetime(2010, 1, 1), max_value=datetime(2035, 12, 31)),
)
def test_local_times_resolve_like_the_naive_model(zone_name: str, local: datetime) -> None:
    local = local.replace(microsecond=local.microsecond // 1000 * 1000)
    zone = zoneinfo.ZoneInfo(zone_name)
    expected = naive_local(local, zone)
    if expected is None:
        with pytest.raises(ScheduleInputError) as info:
            resolve_local(local, zone)
        assert info.value.code == "invalid_rule"
    else:
        assert resolve_local(local, zone) == expected


def transitions(zone: zoneinfo.ZoneInfo, year: int) -> list[tuple[datetime, timedelta, timedelta]]:
    """Every offset change in ``year``: (first instant of the new offset, old, new)."""
    found = []
    moment = datetime(year, 1, 1, tzinfo=UTC)
    end = datetime(year + 1, 1, 1, tzinfo=UTC)
    offset = moment.astimezone(zone).utcoffset()
    while moment < end:
        nxt = moment + timedelta(hours=1)
        new = nxt.astimezone(zone).utcoffset()
        if new != offset:
            low, high = moment, nxt  # bisect to the minute
            while high - low > timedelta(minutes=1):
                mid = low + (high - low) / 2
                if mid.astimezone(zone).utcoffset() == offset:
                    low = mid
                else:
                    high = mid
            assert offset is not None and new is not None
            found.append((high, offset, new))
            offset = new
        moment = nxt
    return found


@pytest.mark.slow
@pytest.mark.parametrize("zone_name", ZONES)
def test_transitions_gaps_refused_overlaps_take_the_earlier_instant(zone_name: str) -> None:
    zone = zoneinfo.ZoneInfo(zone_name)
    checked = 0
    for year in range(2010, 2036):
        for boundary, before, after in transitions(zone, year):
            if after > before:  # clocks went forward: the skipped local times do not exist
                local = (boundary + before).replace(tzinfo=None) + timedelta(seconds=1)
                with pytest.raises(ScheduleInputError) as info:
                    resolve_local(local, zone)
                assert info.value.code == "invalid_rule"
            else:  # clocks went back: the repeated local times happen twice; the earlier wins
                local = (boundary + after).replace(tzinfo=None) + timedelta(seconds=1)
                first = boundary + timedelta(seconds=1) - (before - after)
                assert resolve_local(local, zone) == int(first.timestamp() * 1000)
                assert (first + (before - after)).astimezone(zone).replace(tzinfo=None) == local  # the later one
            checked += 1
    assert checked > 0 or zone_name == "Asia/Kolkata"


def test_at_examples() -> None:
    assert parse_at("2026-07-14T02:00:00+02:00") == T0
    assert parse_at("2026-07-14T00:00:00.5Z") == T0 + 500
    assert parse_at({"date": "2026-10-25", "time": "02:30:00", "time_zone": "Europe/Berlin"}) == parse_at(
        "2026-10-25T02:30:00+02:00"
    )
    for bad, code in [
        ("2026-07-14T00:00:00", "invalid_rule"),
        ("2026-07-14 00:00:00Z", "invalid_rule"),
        ("2026-02-30T00:00:00Z", "invalid_rule"),
        ("2026-07-14T00:00:00-00:00", "invalid_rule"),
        ({"date": "2026-03-29", "time": "02:30:00", "time_zone": "Europe/Berlin"}, "invalid_rule"),
        ({"date": "2026-03-29", "time": "02:30:00"}, "invalid_rule"),
        ({"date": "2026-03-29", "time": "02:30:00", "time_zone": "Mars/Olympus"}, "invalid_time_zone"),
        ({"date": "2026-03-29", "time": "02:30:00", "time_zone": "EST"}, "invalid_time_zone"),
        (5, "invalid_rule"),
    ]:
        with pytest.raises(ScheduleInputError) as info:
            parse_at(bad)
        assert info.value.code == code, bad


def test_the_session_index_folds_like_the_whole_log() -> None:
    from dsh.plugins.schedule.fold import fold_session
    from dsh.session import Session

    session = Session("s", [])
    session.append("turn/start", {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}})
    session.append("schedule/change", create("schedule-1", "every", T0 + 300_000, 300))
    assert list(fold_session(session).active) == ["schedule-1"]  # index built from the log
    session.append("schedule/change", {"version": 1, "operation": "delete", "id": "schedule-1"})
    session.append("schedule/change", create("schedule-2", "at", T0 + 1000))
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    assert list(fold_session(session).active) == ["schedule-2"]  # and kept current
    assert fold_session(session).active == fold(session.events).active
    child = Session("c", session.events, header={"version": 0, "id": "c", "createdAt": T0, "seedLength": len(session)})
    assert fold_session(child).active == {} and fold_session(child).next_id() == "schedule-1"
