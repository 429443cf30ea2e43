"""The constant-time ``ReadingIndex`` agrees with a literal backward scan (docs/time-context.md).

Hypothesis drives random logs: turns with missing, repeated, non-integer or malformed
``turn/start`` numbers, every message type from every kind of source (readings of other plugins
and time-context-sourced messages that are not ``context/message``), log-only events, surface
replaces that shadow readings (some replaces are themselves readings), resumes that seed a new
``Session`` from the events (both seed paths), and a wall clock that jumps backwards. After each
operation, the index's answers and the plugin's whole decision (inject or not, and the exact
text) must equal what the naive scan below computes from the raw events.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as note_event
from hypothesis import strategies as st
from tests.support.clock import T0, Clock

from dsh.agent.agent import Agent, AgentOptions
from dsh.plugins import time_context
from dsh.plugins.time_context import ReadingIndex, TimeContext, reading_index, render_reading
from dsh.runtime import AbortController, Context
from dsh.session import Event, Session

TC = {"kind": "plugin", "plugin": "time-context"}
SOURCES: list[Any] = [
    TC,
    {"kind": "plugin", "plugin": "compact"},
    {"kind": "plugin", "plugin": "other"},
    {"kind": "user"},
    {"kind": "plugin"},
    {"plugin": "time-context"},
    {"kind": "user", "plugin": "time-context"},
    "time-context",
]
MESSAGE_TYPES = [
    "user/message",
    "assistant/message",
    "tool/result",
    "context/message",
    "steering/message",
]
INTERVALS = [0, 1, 1_000, 60_000, 120_000]
ZONE, ZONE_NAME = time_context.resolve_zone("Asia/Kathmandu")

# -- the literal reference: newest-to-oldest scans over the raw log ------------------------------


def naive_is_reading(event: Event) -> bool:
    if event.type != "context/message":
        return False
    source = event.data.get("source")
    return (
        isinstance(source, dict)
        and source.get("kind") == "plugin"
        and source.get("plugin") == "time-context"
    )


def js_strict_equals_turn(value: Any, turn: int) -> bool:
    """``value === turn`` for a JS number ``turn``: only a number (not a boolean) can match."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == turn


def naive_last_reading(events: list[Event]) -> int | None:
    for event in reversed(events):
        if naive_is_reading(event):
            return event.time
    return None


def naive_last_message(events: list[Event]) -> int | None:
    for event in reversed(events):
        if event.type in MESSAGE_TYPES:
            return event.time
    return None


def naive_reading_in_turn(events: list[Event], turn: int) -> int | None:
    for event in reversed(events):
        if event.type == "turn/start":
            data = event.data
            if isinstance(data, dict) and js_strict_equals_turn(data.get("turn"), turn):
                return None
        if naive_is_reading(event):
            return event.time
    return None


def naive_attempt(events: list[Event], turn: int, step: int, now: int, interval: int) -> str | None:
    """docs/time-context.md, "When a reading is taken" steps 2-5: the reading text, or ``None`` when the interval suppresses it."""
    if interval > 0:
        last = naive_last_reading(events)
        if last is not None and now >= last and now - last < interval:
            return None
    baseline = naive_last_message(events) if step == 1 else naive_reading_in_turn(events, turn)
    return render_reading(turn, step, now, baseline, ZONE, ZONE_NAME)


# -- random logs ---------------------------------------------------------------------------------

TURN_DATA = st.one_of(
    st.integers(1, 5).map(
        lambda t: {"turn": t, "trigger": {"kind": "message", "source": {"kind": "user"}}}
    ),
    st.sampled_from(
        [
            {"turn": 1.0},
            {"turn": 2.0},
            {"turn": True},
            {"turn": "1"},
            {"turn": None},
            {},
            {"turn": [1]},
            {"turn": {"n": 1}},
            [],
            "x",
        ]
    ),
)
OPS = st.one_of(
    st.tuples(st.just("advance"), st.integers(-200_000, 200_000)),
    st.tuples(st.just("turn/start"), TURN_DATA),
    st.tuples(st.just("turn/end")),
    st.tuples(
        st.just("message"),
        st.sampled_from(MESSAGE_TYPES),
        st.integers(0, len(SOURCES) - 1),
        st.booleans(),
    ),
    st.tuples(st.just("reading")),
    st.tuples(
        st.just("log"),
        st.sampled_from(
            [
                "step/start",
                "step/end",
                "assistant/chunk",
                "tool/call",
                "request/header",
                "compact/start",
            ]
        ),
    ),
    st.tuples(
        st.just("replace"),
        st.integers(0, 50),
        st.integers(0, 50),
        st.sampled_from(["user/message", "context/message"]),
        st.integers(0, len(SOURCES) - 1),
    ),
    st.tuples(st.just("resume"), st.booleans(), st.booleans()),
    st.tuples(st.just("fire"), st.integers(0, 6), st.integers(1, 3), st.sampled_from(INTERVALS)),
)


def message_data(kind: str, source: Any, empty: bool) -> dict[str, Any]:
    content = [] if empty and kind == "assistant/message" else [{"type": "text", "text": kind}]
    if kind == "assistant/message":
        return {"turn": 1, "step": 1, "content": content}
    if kind == "tool/result":
        return {"turn": 1, "step": 1, "callId": "c", "content": content, "isError": False}
    if kind == "steering/message":
        return {"turn": 1, "content": content, "source": source}
    return {"content": content, "source": source}


LOG_DATA: dict[str, Any] = {
    "step/start": {"turn": 1, "step": 1},
    "step/end": {"turn": 1, "step": 1},
    "assistant/chunk": {
        "turn": 1,
        "step": 1,
        "chunk": {"type": "finish", "reason": {"kind": "stop"}},
    },
    "tool/call": {"turn": 1, "step": 1, "callId": "c", "name": "echo", "arguments": "{}"},
    "request/header": {"header": {"config": {"model": "m"}}, "reason": "initial"},
    "compact/start": {"turn": 1},
}


class World:
    """One live session, its agent, and a clock that every append and every reading uses."""

    def __init__(self, clock: Clock, eager: bool) -> None:
        clock.set(T0)
        self.clock = clock
        self.ctx = Context()
        self.plugins = {i: TimeContext(ZONE, ZONE_NAME, i) for i in INTERVALS}
        self.adopt(Session("s"), eager)

    def adopt(self, session: Session, eager: bool) -> None:
        self.session = session
        self.agent = Agent(self.ctx, "a", session, AgentOptions(model="m"))
        if eager:
            reading_index(session)  # else built on first use, from the whole log

    @property
    def now(self) -> int:
        return self.clock.now()

    def apply(self, op: tuple[Any, ...]) -> None:
        kind, *args = op
        append = self.session.append
        if kind == "advance":
            self.clock.set(max(0, self.now + args[0]))
        elif kind == "turn/start":
            append("turn/start", args[0])
        elif kind == "turn/end":
            append("turn/end", {"turn": self.session.last_turn, "reason": {"kind": "completed"}})
        elif kind == "message":
            append(args[0], message_data(args[0], SOURCES[args[1]], args[2]), surface_op="append")
        elif kind == "reading":
            append(
                "context/message", message_data("context/message", TC, False), surface_op="append"
            )
        elif kind == "log":
            append(args[0], LOG_DATA[args[0]])
        elif kind == "replace":
            nodes = self.session.surface
            if not nodes:
                return
            i, j = sorted((args[0] % len(nodes), args[1] % len(nodes)))
            append(
                args[2],
                message_data(args[2], SOURCES[args[3]], False),
                surface_op={"op": "replace", "start": nodes[i], "end": nodes[j]},
                source_event_seqs=list(nodes[i : j + 1]),
            )
            if any(naive_is_reading(self.session.events[n]) for n in nodes[i : j + 1]):
                note_event("replace shadowed a reading")
        elif kind == "resume":
            events = list(self.session.events)
            seeded = Session.restore("s", events) if args[0] else Session("s", events)
            assert list(seeded.events) == events
            self.adopt(seeded, args[1])
            note_event("resume")
        elif kind == "fire":
            self.fire(*args)

    def fire(self, turn: int, step: int, interval: int) -> None:
        events = list(self.session.events)
        expected = naive_attempt(events, turn, step, self.now, interval)
        self.plugins[interval].on_pre_step(self.agent, turn, step, "", [], AbortController().signal)
        appended = self.session.events[len(events) :]
        readings = [e for e in appended if naive_is_reading(e)]
        if expected is None:
            note_event("fire: suppressed")
            assert appended == []
        else:
            note_event(
                f"fire: injected step {'1' if step == 1 else '>1'}, {expected.rsplit(': ', 1)[1]!r}"[
                    :60
                ]
            )
            assert len(readings) == 1
            assert readings[0].data["content"] == [{"type": "text", "text": expected}]
            assert readings[0].time == self.now

    def check(self) -> None:
        events = list(self.session.events)
        index: ReadingIndex = reading_index(self.session)
        assert index.last_reading_time == naive_last_reading(events)
        assert index.last_message_time == naive_last_message(events)
        for turn in range(0, 7):
            assert index.reading_in_turn(turn) == naive_reading_in_turn(events, turn), turn
        # A fresh index built from the same log in one go agrees with the incremental one.
        rebuilt = ReadingIndex()
        for event in events:
            rebuilt.observe(event)
        assert (rebuilt.last_reading_time, rebuilt.last_message_time, rebuilt.last_reading_seq) == (
            index.last_reading_time,
            index.last_message_time,
            index.last_reading_seq,
        )


@pytest.mark.slow
@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(eager=st.booleans(), ops=st.lists(OPS, min_size=20, max_size=120))
def test_index_agrees_with_a_full_backward_scan(
    clock: Clock, eager: bool, ops: list[tuple[Any, ...]]
) -> None:
    world = World(clock, eager)
    for op in ops:
        world.apply(op)
        world.check()
