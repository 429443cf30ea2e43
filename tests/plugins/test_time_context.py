"""time-context: readings, baselines, scheduling, config and metadata (docs/time-context.md).

Every case runs the real plugin, mounted with ``ctx.plugin(time_context, config)`` on a ``Context``
with the agent spine, against a real agent and session, firing through
``ctx.serial('agent/pre-step', agent, turn, step, '', [], signal)`` with the wall clock frozen.
The agent loop itself is exercised in ``test_time_context_loop.py``.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from tc_support import (
    SOURCE,
    TimeContextRig,
    load_cases,
    reading_line,
    reading_texts,
    text_of,
    utc_stamp,
)
from tests.support.clock import T0, frozen_clock
from tests.support.rig import make_rig

from dsh.persistence.base import StoredSession
from dsh.plugins import time_context
from dsh.plugins.time_context import format_duration, format_timestamp
from dsh.runtime import AbortController, ConfigError
from dsh.session import Session, to_json

# -- the recorded reference readings -------------------------------------------------------------

# dsh prints the zone key as resolved, not ICU's legacy names (fixture README, "How dsh uses").
ICU_LEGACY = {"Asia/Calcutta": "Asia/Kolkata", "Asia/Katmandu": "Asia/Kathmandu"}
CASES = load_cases()


def expected_text(case: dict[str, Any]) -> str:
    text: str = case["output"]["text"]
    bracket = case["output"]["bracketZone"]
    return text.replace(f"[{bracket}]", f"[{ICU_LEGACY.get(bracket, bracket)}]")


def test_fixture_has_the_documented_cases() -> None:
    assert len(CASES) == 22
    assert {c["output"]["bracketZone"] for c in CASES} >= {"Asia/Calcutta", "Asia/Katmandu", "UTC"}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
async def test_reference_reading(case: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    given_ = case["input"]
    monkeypatch.setenv("TZ", given_["processTZ"])  # the zone is resolved at load
    message = given_.get("precedingModelVisibleMessage")
    step_context = given_.get("precedingStepContext")
    start = min(x["atMs"] for x in (message, step_context, {"atMs": given_["nowMs"]}) if x)
    with frozen_clock(start) as clock:
        rig = await make_rig(
            clock=clock, models=("m",), plugins=[(time_context, given_["config"])], rig_class=TimeContextRig
        )
        agent = rig.agent()
        turn, step = given_["turn"], given_["step"]
        rig.open_turn(agent, turn, text=None)
        for earlier in sorted((x for x in (message, step_context) if x), key=lambda x: x["atMs"]):
            rig.clock.set(earlier["atMs"])
            if earlier["type"] == "user/message":
                agent.session.append(
                    "user/message",
                    {"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}},
                    surface_op="append",
                )
            else:
                assert earlier["source"] == SOURCE
                agent.session.append(
                    "context/message",
                    {"content": [{"type": "text", "text": "earlier reading"}], "source": SOURCE},
                    surface_op="append",
                )
        rig.clock.set(given_["nowMs"])
        events = await rig.fire(agent, turn, step)
        await rig.dispose()
    assert len(events) == 1
    assert text_of(events[0]) == expected_text(case)
    assert events[0].time == given_["nowMs"]


# -- formatting ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0s"),
        (999, "0s"),
        (-1, "0s"),
        (-86_400_000, "0s"),
        (1_000, "1s"),
        (59_999, "59s"),
        (60_000, "1m 0s"),
        (61_000, "1m 1s"),
        (3_600_000, "1h 0s"),
        (3_660_000, "1h 1m 0s"),
        (3_725_000, "1h 2m 5s"),
        (86_400_000, "1d 0s"),
        (86_401_000, "1d 1s"),
        (90_000_000, "1d 1h 0s"),
        (90_061_000, "1d 1h 1m 1s"),
        (400 * 86_400_000, "400d 0s"),
    ],
)
def test_format_duration(ms: int, text: str) -> None:
    assert format_duration(ms) == text


@given(st.integers(min_value=-(10**12), max_value=10**13))
@example(0)
def test_format_duration_round_trips(ms: int) -> None:
    text = format_duration(ms)
    assert re.fullmatch(
        r"(?:[1-9]\d*d )?(?:(?:[1-9]|1\d|2[0-3])h )?(?:(?:[1-9]|[1-5]\d)m )?(?:[0-5]?\d)s", text
    )
    units = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
    total = sum(int(part[:-1]) * units[part[-1]] for part in text.split())
    assert total == max(0, ms) // 1000


def zone(key: str) -> Any:
    return time_context.resolve_zone(key)


@pytest.mark.parametrize(
    ("key", "ms", "stamp"),
    [
        ("UTC", T0, "2026-07-14T00:00:00+00:00[UTC]"),
        ("UTC", T0 + 999, "2026-07-14T00:00:00+00:00[UTC]"),  # truncated, never rounded
        ("UTC", T0 - 1, "2026-07-13T23:59:59+00:00[UTC]"),
        ("Etc/UTC", T0, "2026-07-14T00:00:00+00:00[UTC]"),
        ("GMT", T0, "2026-07-14T00:00:00+00:00[UTC]"),
        ("Zulu", T0, "2026-07-14T00:00:00+00:00[UTC]"),
        ("Europe/London", T0, "2026-07-14T01:00:00+01:00[Europe/London]"),
        ("Europe/London", 1_768_478_400_000, "2026-01-15T12:00:00+00:00[Europe/London]"),
        ("Asia/Shanghai", T0 + 86_399_000, "2026-07-15T07:59:59+08:00[Asia/Shanghai]"),
        ("Asia/Kolkata", T0, "2026-07-14T05:30:00+05:30[Asia/Kolkata]"),
        ("Asia/Kathmandu", T0, "2026-07-14T05:45:00+05:45[Asia/Kathmandu]"),
        ("America/St_Johns", T0, "2026-07-13T21:30:00-02:30[America/St_Johns]"),
        ("Pacific/Kiritimati", T0, "2026-07-14T14:00:00+14:00[Pacific/Kiritimati]"),
        ("Etc/GMT+12", T0, "2026-07-13T12:00:00-12:00[Etc/GMT+12]"),
        # New York, spring forward on 2026-03-08 at 07:00Z: 01:59:59 EST then 03:00:00 EDT.
        ("America/New_York", 1_772_953_199_000, "2026-03-08T01:59:59-05:00[America/New_York]"),
        ("America/New_York", 1_772_953_200_000, "2026-03-08T03:00:00-04:00[America/New_York]"),
        # Fall back on 2026-11-01 at 06:00Z: 01:30 happens twice, with different offsets.
        ("America/New_York", 1_793_511_000_000, "2026-11-01T01:30:00-04:00[America/New_York]"),
        ("America/New_York", 1_793_514_600_000, "2026-11-01T01:30:00-05:00[America/New_York]"),
        ("asia/shanghai", T0, "2026-07-14T08:00:00+08:00[Asia/Shanghai]"),  # ICU matches any case
    ],
)
def test_format_timestamp(key: str, ms: int, stamp: str) -> None:
    tz, name = zone(key)
    assert format_timestamp(ms, tz, name) == stamp


def test_reading_has_two_lines_and_no_trailing_newline() -> None:
    tz, name = zone("UTC")
    text = time_context.render_reading(7, 3, T0 + 5_000, T0, tz, name)
    assert text == (
        "Time sampled while preparing turn 7, step 3: 2026-07-14T00:00:05+00:00[UTC]\n"
        "Elapsed since the preceding step context: 5s."
    )
    assert time_context.render_reading(1, 1, T0, None, tz, name).endswith(
        "Elapsed since the preceding model-visible message: unavailable."
    )


# -- elapsed baselines ---------------------------------------------------------------------------


MESSAGES: dict[str, dict[str, Any]] = {
    "user/message": {"content": [{"type": "text", "text": "u"}], "source": {"kind": "user"}},
    "assistant/message": {"turn": 1, "step": 1, "content": [{"type": "text", "text": "a"}]},
    # A usage-only assistant message is invisible to the model but still a message event.
    "assistant/message#empty": {
        "turn": 1,
        "step": 1,
        "content": [],
        "usage": {"inputTokens": 1, "outputTokens": 0},
    },
    "tool/result": {
        "turn": 1,
        "step": 1,
        "callId": "c1",
        "content": [{"type": "text", "text": "r"}],
        "isError": False,
    },
    "context/message": {
        "content": [{"type": "text", "text": "c"}],
        "source": {"kind": "plugin", "plugin": "other"},
    },
    "context/message#user": {
        "content": [{"type": "text", "text": "c"}],
        "source": {"kind": "user"},
        "envelope": "raw",
    },
    "steering/message": {
        "turn": 1,
        "content": [{"type": "text", "text": "s"}],
        "source": {"kind": "user"},
    },
}
LOG_ONLY: list[tuple[str, dict[str, Any]]] = [
    ("step/start", {"turn": 1, "step": 1}),
    (
        "assistant/chunk",
        {"turn": 1, "step": 1, "chunk": {"type": "finish", "reason": {"kind": "stop"}}},
    ),
    ("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": "{}"}),
    ("step/end", {"turn": 1, "step": 1}),
    ("request/header", {"header": {"config": {"model": "m"}}, "reason": "initial"}),
    ("compact/start", {"turn": 1}),
    ("compact/end", {"turn": 1}),
    ("todo/write", {"todos": []}),
]


@pytest.mark.parametrize("kind", list(MESSAGES))
async def test_step1_baseline_is_the_latest_message_of_any_type(rig: TimeContextRig, kind: str) -> None:
    await rig.load()
    agent = rig.agent()
    rig.open_turn(agent, 1)  # user/message at T0
    rig.clock.set(T0 + 10_000)
    agent.session.append(kind.split("#")[0], MESSAGES[kind], surface_op="append")
    for offset, (log_type, data) in enumerate(LOG_ONLY, start=1):
        rig.clock.set(T0 + 10_000 + offset * 1_000)  # none of these is a baseline
        agent.session.append(log_type, data)
    rig.clock.set(T0 + 75_000)
    assert await rig.reading(agent, 1, 1) == reading_line(1, 1, utc_stamp(T0 + 75_000), "1m 5s")


async def test_step1_baseline_crosses_turns_and_is_unavailable_without_messages(rig: TimeContextRig) -> None:
    await rig.load()
    agent = rig.agent()
    rig.open_turn(agent, 1, text=None)
    rig.clock.set(T0 + 3_000)
    assert await rig.reading(agent, 1, 1) == reading_line(
        1, 1, utc_stamp(T0 + 3_000), "unavailable"
    )
    rig.close_turn(agent, 1)
    # The reading is itself a model-visible message: turn 2 (opened without a prompt, as an
    # injection-triggered turn would be) measures from it.
    rig.clock.set(T0 + 3_725_000)
    rig.open_turn(agent, 2, text=None)
    assert await rig.reading(agent, 2, 1) == reading_line(
        2, 1, utc_stamp(T0 + 3_725_000), "1h 2m 2s"
    )


async def test_step1_in_a_real_turn_reads_zero_seconds(rig: TimeContextRig) -> None:
    await rig.load()
    agent = rig.agent()
    rig.clock.set(T0 + 42_000)
    rig.open_turn(agent, 1)
    assert await rig.reading(agent, 1, 1) == reading_line(1, 1, utc_stamp(T0 + 42_000), "0s")


async def test_later_step_baseline_is_the_preceding_reading_of_the_same_turn(rig: TimeContextRig) -> None:
    await rig.load()
    agent = rig.agent()
    rig.open_turn(agent, 1)
    await rig.fire(agent, 1, 1)
    rig.clock.set(T0 + 20_000)
    agent.session.append("step/start", {"turn": 1, "step": 1})
    agent.session.append("assistant/message", MESSAGES["assistant/message"], surface_op="append")
    agent.session.append(
        "tool/result", MESSAGES["tool/result"], surface_op="append"
    )  # not a baseline
    agent.session.append("step/end", {"turn": 1, "step": 1})
    rig.clock.set(T0 + 65_000)
    assert await rig.reading(agent, 1, 2) == reading_line(1, 2, utc_stamp(T0 + 65_000), "1m 5s")
    rig.clock.set(T0 + 66_000)
    assert await rig.reading(agent, 1, 3) == reading_line(1, 3, utc_stamp(T0 + 66_000), "1s")


async def test_later_step_baseline_stops_at_this_turns_start(rig: TimeContextRig) -> None:
    await rig.load()
    agent = rig.agent()
    rig.open_turn(agent, 1)
    await rig.fire(agent, 1, 1)
    rig.close_turn(agent, 1)
    rig.clock.set(T0 + 5_000)
    rig.open_turn(agent, 2)
    assert await rig.reading(agent, 2, 2) == reading_line(
        2, 2, utc_stamp(T0 + 5_000), "unavailable"
    )


async def test_later_step_baseline_quirk_without_a_matching_turn_start(rig: TimeContextRig) -> None:
    """The scan stops only at ``turn/start`` of the *same* number (docs/time-context.md)."""
    await rig.load()
    agent = rig.agent()
    rig.open_turn(agent, 1)
    await rig.fire(agent, 1, 1)
    rig.close_turn(agent, 1)
    rig.clock.set(T0 + 7_000)
    rig.open_turn(agent, 9)  # not turn 2: the step-2 scan walks past it into turn 1
    assert await rig.reading(agent, 2, 2) == reading_line(2, 2, utc_stamp(T0 + 7_000), "7s")


# -- interval scheduling -------------------------------------------------------------------------


@pytest.mark.parametrize("config", [None, {}, {"refreshIntervalMs": 0}, {"refreshIntervalMs": 0.0}])
async def test_omitted_or_zero_interval_injects_on_every_attempt(rig: TimeContextRig, config: Any) -> None:
    await rig.load(config)
    agent = rig.agent()
    rig.open_turn(agent, 1)
    for step in (1, 2, 2, 3):  # same instant, repeated attempts included
        assert await rig.reading(agent, 1, step) is not None
    assert len(reading_texts(agent.session)) == 4


@pytest.mark.parametrize("interval", [1, 999, 60_000, 86_400_000])
async def test_threshold_boundaries(rig: TimeContextRig, interval: int) -> None:
    await rig.load({"refreshIntervalMs": interval})
    agent = rig.agent()
    rig.open_turn(agent, 1)
    assert await rig.reading(agent, 1, 1) is not None  # no earlier reading
    rig.clock.set(T0)
    assert await rig.reading(agent, 1, 2) is None  # age 0
    rig.clock.set(T0 + interval - 1)
    assert await rig.reading(agent, 1, 2) is None  # age interval - 1
    rig.clock.set(T0 + interval)
    assert await rig.reading(agent, 1, 2) == reading_line(
        1, 2, utc_stamp(T0 + interval), format_duration(interval)
    )  # exactly the interval
    rig.clock.set(T0 + 2 * interval - 1)
    assert await rig.reading(agent, 1, 3) is None  # measured from the newest reading


async def test_suppression_can_leave_a_later_step_without_a_baseline(rig: TimeContextRig) -> None:
    await rig.load({"refreshIntervalMs": 60_000})
    agent = rig.agent()
    rig.open_turn(agent, 1)
    await rig.fire(agent, 1, 1)
    rig.close_turn(agent, 1)
    rig.clock.set(T0 + 30_000)
    rig.open_turn(agent, 2)
    assert await rig.reading(agent, 2, 1) is None  # turn 1's reading is 30 s old
    rig.clock.set(T0 + 60_000)
    assert await rig.reading(agent, 2, 2) == reading_line(
        2, 2, utc_stamp(T0 + 60_000), "unavailable"
    )


async def test_scheduling_crosses_turns(rig: TimeContextRig) -> None:
    await rig.load({"refreshIntervalMs": 60_000})
    agent = rig.agent()
    rig.open_turn(agent, 1)
    await rig.fire(agent, 1, 1)
    rig.close_turn(agent, 1)
    for turn, ms, due in [
        (2, 59_999, False),
        (3, 60_000, True),
        (4, 119_999, False),
        (5, 120_000, True),
    ]:
        rig.clock.set(T0 + ms)
        rig.open_turn(agent, turn)
        text = await rig.reading(agent, turn, 1)
        assert (text is not None) is due, (turn, ms)
        if due:
            assert text == reading_line(turn, 1, utc_stamp(T0 + ms), "0s")
        rig.close_turn(agent, turn)


async def test_sessions_are_scheduled_independently(rig: TimeContextRig) -> None:
    await rig.load({"refreshIntervalMs": 60_000})
    a, b = rig.agent("a"), rig.agent("b")
    assert a.session is not b.session
    rig.open_turn(a, 1)
    rig.open_turn(b, 1)
    assert await rig.reading(a, 1, 1) is not None
    rig.clock.set(T0 + 1_000)
    assert await rig.reading(b, 1, 1) == reading_line(1, 1, utc_stamp(T0 + 1_000), "1s")
    rig.clock.set(T0 + 2_000)
    assert await rig.reading(a, 1, 2) is None
    assert await rig.reading(b, 1, 2) is None
    rig.clock.set(T0 + 60_000)
    assert await rig.reading(a, 1, 2) == reading_line(1, 2, utc_stamp(T0 + 60_000), "1m 0s")
    assert await rig.reading(b, 1, 2) is None  # b's reading is 59 s old
    rig.clock.set(T0 + 61_000)
    assert await rig.reading(b, 1, 2) == reading_line(1, 2, utc_stamp(T0 + 61_000), "1m 0s")
    assert len(reading_texts(a.session)) == len(reading_texts(b.session)) == 2


async def test_backward_clock_injects_and_clamps_elapsed(rig: TimeContextRig) -> None:
    await rig.load({"refreshIntervalMs": 60_000})
    agent = rig.agent()
    rig.open_turn(agent, 1)
    await rig.fire(agent, 1, 1)
    rig.clock.set(T0 - 5_000)  # wall time moved backwards: now < last
    assert await rig.reading(agent, 1, 2) == reading_line(1, 2, utc_stamp(T0 - 5_000), "0s")
    # The newest reading by log position (stamped T0 - 5 s) governs, not the largest time.
    rig.clock.set(T0 + 54_999)
    assert await rig.reading(agent, 1, 3) is None
    rig.clock.set(T0 + 55_000)
    assert await rig.reading(agent, 1, 3) == reading_line(1, 3, utc_stamp(T0 + 55_000), "1m 0s")


async def test_backward_clock_clamps_step1_elapsed(rig: TimeContextRig) -> None:
    await rig.load()
    agent = rig.agent()
    rig.open_turn(agent, 1)
    rig.clock.set(T0 - 90_061_000)
    assert await rig.reading(agent, 1, 1) == reading_line(1, 1, utc_stamp(T0 - 90_061_000), "0s")


# -- config --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        (-1, "-1"),
        (0.5, "0.5"),
        (2**53, "9007199254740992"),
        (float(2**53), "9007199254740992"),
        (float("inf"), "Infinity"),
        (float("-inf"), "-Infinity"),
        (float("nan"), "NaN"),
        (True, "true"),
        (False, "false"),
        ("abc", "abc"),
        ("60000", "60000"),
        (-0.5, "-0.5"),
        (1.5e-7, "1.5e-7"),
        (5e-5, "0.00005"),
        (10**21, "1e+21"),
        ([1, 2], "1,2"),
        ({"a": 1}, "[object Object]"),
    ],
)
async def test_invalid_refresh_interval(rig: TimeContextRig, value: Any, rendered: str) -> None:
    with pytest.raises(TypeError) as raised:
        await rig.load({"refreshIntervalMs": value})
    assert str(raised.value) == (
        f"time-context: refreshIntervalMs must be a non-negative safe integer, got {rendered}"
    )
    assert rig.ctx.listeners("agent/pre-step") == 0
    assert not rig.ctx.has("time_context")


@pytest.mark.parametrize("value", [0, 1, 60_000, 60_000.0, 2**53 - 1, float(2**53 - 1), -0.0])
async def test_valid_refresh_interval(rig: TimeContextRig, value: Any) -> None:
    await rig.load({"refreshIntervalMs": value})
    plugin = rig.ctx.time_context
    assert plugin.refresh_interval_ms == int(value)
    assert type(plugin.refresh_interval_ms) is int


async def test_integral_float_interval_schedules_like_the_integer(rig: TimeContextRig) -> None:
    await rig.load({"refreshIntervalMs": 60000.0})
    agent = rig.agent()
    rig.open_turn(agent, 1)
    await rig.fire(agent, 1, 1)
    rig.clock.set(T0 + 59_999)
    assert await rig.reading(agent, 1, 2) is None
    rig.clock.set(T0 + 60_000)
    assert await rig.reading(agent, 1, 2) is not None


@pytest.mark.parametrize(
    "key",
    [
        "Not/A_Real_Zone",
        "",
        "../../etc/passwd",
        "/usr/share/zoneinfo/UTC",
        "America",
        "Asia/Shanghai ",
        'quo"te',
    ],
)
async def test_invalid_time_zone(rig: TimeContextRig, key: str) -> None:
    with pytest.raises(ValueError) as raised:
        await rig.load({"timeZone": key})
    quoted = '"' + key.replace('"', '\\"') + '"'
    assert str(raised.value) == f"time-context: invalid IANA timeZone {quoted}"
    assert raised.value.__cause__ is not None
    assert rig.ctx.listeners("agent/pre-step") == 0


async def test_unknown_keys_are_refused_with_the_closest_key(rig: TimeContextRig) -> None:
    # dsh departs from the reference here: its schema ignores extra keys, dsh names the typo.
    with pytest.raises(ConfigError, match=r'^unknown key "timezone" \(did you mean "timeZone"\?\)$'):
        await rig.load({"timezone": "Asia/Tokyo"})
    assert not rig.ctx.has("time_context")


async def test_time_zone_must_be_a_string(rig: TimeContextRig) -> None:
    with pytest.raises(ConfigError, match=r"^\$\.timeZone"):
        await rig.load({"timeZone": 5})


async def test_unresolvable_process_zone(rig: TimeContextRig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Not/A_Real_Zone")
    with pytest.raises(ValueError) as raised:
        await rig.load()
    assert str(raised.value) == (
        'time-context: TZ="Not/A_Real_Zone" is not an IANA time zone; '
        "set TZ=Area/City or timeZone in the config"
    )
    assert raised.value.__cause__ is not None
    assert rig.ctx.listeners("agent/pre-step") == 0
    # An explicit zone never consults the process zone.
    await rig.load({"timeZone": "Asia/Shanghai"})


@pytest.mark.parametrize(
    ("tz", "name"),
    [
        ("Asia/Shanghai", "Asia/Shanghai"),
        (":Asia/Shanghai", "Asia/Shanghai"),
        ("America/New_York", "America/New_York"),
        ("Asia/Kolkata", "Asia/Kolkata"),
        ("Etc/UTC", "UTC"),
        ("Etc/Zulu", "UTC"),
        ("GMT0", "UTC"),
        ("Europe/Berlin", "Europe/Berlin"),
    ],
)
async def test_process_zone(rig: TimeContextRig, monkeypatch: pytest.MonkeyPatch, tz: str, name: str) -> None:
    monkeypatch.setenv("TZ", tz)
    await rig.load()
    assert rig.ctx.time_context.zone_name == name


async def test_process_zone_without_tz(rig: TimeContextRig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TZ")
    expected = time_context.system_zone_key()
    await rig.load()
    name = rig.ctx.time_context.zone_name
    assert name == ("UTC" if expected in time_context.UTC_ALIASES else expected)
    monkeypatch.setenv("TZ", "")  # empty counts as unset
    assert time_context.system_zone_key() == expected


async def test_later_tz_change_does_not_change_readings(
    rig: TimeContextRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    await rig.load()
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        agent = rig.agent()
        rig.open_turn(agent, 1)
        text = await rig.reading(agent, 1, 1)
    finally:
        monkeypatch.setenv("TZ", "UTC")
        time.tzset()
    assert text == reading_line(1, 1, "2026-07-14T08:00:00+08:00[Asia/Shanghai]", "0s")


# -- signal, disposal, metadata, ordering --------------------------------------------------------


async def test_aborted_signal_appends_nothing(rig: TimeContextRig) -> None:
    await rig.load()
    agent = rig.agent()
    rig.open_turn(agent, 1)
    controller = AbortController()
    controller.abort("x")
    assert await rig.fire(agent, 1, 1, controller.signal) == []
    assert reading_texts(agent.session) == []
    # Nor does an aborted attempt count for scheduling: the next one is a step-1 "first" reading.
    assert await rig.reading(agent, 1, 1) == reading_line(1, 1, utc_stamp(T0), "0s")


async def test_disposal_removes_the_listener(rig: TimeContextRig) -> None:
    fiber = await rig.load()
    assert rig.ctx.listeners("agent/pre-step") == 1
    agent = rig.agent()
    rig.open_turn(agent, 1)
    assert len(await rig.fire(agent, 1, 1)) == 1
    await fiber.dispose()
    assert rig.ctx.listeners("agent/pre-step") == 0
    assert not rig.ctx.has("time_context")
    assert await rig.fire(agent, 1, 2) == []
    await rig.load()  # loads again cleanly
    assert len(await rig.fire(agent, 1, 2)) == 1


async def test_source_and_surface_metadata(rig: TimeContextRig) -> None:
    await rig.load({"timeZone": "Asia/Shanghai"})
    agent = rig.agent()
    rig.open_turn(agent, 1)
    (event,) = await rig.fire(agent, 1, 1)
    text = reading_line(1, 1, "2026-07-14T08:00:00+08:00[Asia/Shanghai]", "0s")
    assert event.type == "context/message"
    assert event.data == {"content": [{"type": "text", "text": text}], "source": SOURCE}
    assert list(event.data) == ["content", "source"]  # no envelope, no meta
    assert event.surface_op == "append"
    assert event.source_event_seqs is None
    escaped = text.replace("\n", "\\n")
    assert to_json(event) == (
        f'{{"type":"context/message","seq":{event.seq},"time":{T0},"data":{{"content":[{{"type":"text",'
        f'"text":"{escaped}"}}],"source":{{"kind":"plugin","plugin":"time-context"}}}},'
        '"surfaceOp":"append"}'
    )
    assert agent.session.surface[-1] == event.seq
    assert agent.session.derive_messages()[-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": '<context source="plugin">'},
            {"type": "text", "text": text},
            {"type": "text", "text": "</context>"},
        ],
    }


async def test_outside_a_turn_the_reading_gets_an_injection_turn(rig: TimeContextRig) -> None:
    await rig.load()
    agent = rig.agent()
    events = await rig.fire(agent, 1, 1)
    assert [e.type for e in events] == ["turn/start", "context/message", "turn/end"]
    assert events[0].data == {"turn": 1, "trigger": {"kind": "injection", "source": SOURCE}}
    assert events[2].data == {"turn": 1, "reason": {"kind": "completed"}}


async def test_prepend_runs_before_earlier_listeners(rig: TimeContextRig) -> None:
    seen: list[tuple[str, int]] = []

    def earlier(agent: Any, *_: Any) -> None:  # e.g. automatic compaction
        seen.append(("earlier", len(reading_texts(agent.session))))

    rig.ctx.on("agent/pre-step", earlier)
    await rig.load()

    def later_prepend(agent: Any, *_: Any) -> None:
        seen.append(("later-prepend", len(reading_texts(agent.session))))

    rig.ctx.on("agent/pre-step", later_prepend, prepend=True)
    agent = rig.agent()
    rig.open_turn(agent, 1)
    await rig.fire(agent, 1, 1)
    # A later prepend still goes first; the earlier ordinary listener sees the new reading.
    assert seen == [("later-prepend", 0), ("earlier", 1)]


async def test_listener_is_global_across_agents(rig: TimeContextRig) -> None:
    await rig.load()
    agents = [rig.agent(f"a{i}") for i in range(3)]
    for agent in agents:
        rig.open_turn(agent, 1)
        assert len(await rig.fire(agent, 1, 1)) == 1


async def test_agents_that_exist_before_load_are_indexed(rig: TimeContextRig) -> None:
    agent = rig.agent()
    rig.open_turn(agent, 1)
    agent.session.append(
        "context/message",
        {"content": [{"type": "text", "text": "x"}], "source": SOURCE},
        surface_op="append",
    )
    await rig.load({"refreshIntervalMs": 60_000})
    rig.clock.set(T0 + 59_999)
    assert await rig.reading(agent, 1, 2) is None
    rig.clock.set(T0 + 60_000)
    assert await rig.reading(agent, 1, 2) == reading_line(1, 2, utc_stamp(T0 + 60_000), "1m 0s")


# -- resume after compaction ---------------------------------------------------------------------


class MemoryStore:
    """Just enough of a session store for ``agent_loop.resume``."""

    def __init__(self, sessions: dict[str, Session]) -> None:
        self.sessions = sessions

    async def load(self, session_id: str) -> StoredSession:
        session = self.sessions[session_id]
        return StoredSession(header=dict(session.header), events=list(session.events))

    async def release(self, session_id: str) -> None:
        return None


def compacted_log(rig: TimeContextRig) -> Session:
    """Two turns whose readings a compaction replace shadows; turn 2 left open mid-preparation.

    The readings are at T0 (turn 1, step 1) and T0 + 10 s (turn 2, step 1); the replace lands
    at T0 + 12 s, so no reading is left on the surface.
    """
    session = Session("resumed-session")
    append = session.append
    user = {"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}

    def reading(turn: int, step: int, stamp: int) -> None:
        text = reading_line(turn, step, utc_stamp(stamp), "0s")
        append(
            "context/message",
            {"content": [{"type": "text", "text": text}], "source": SOURCE},
            surface_op="append",
        )

    rig.clock.set(T0)
    append(
        "turn/start", {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}}
    )  # 0
    append("user/message", user, surface_op="append")  # 1
    reading(1, 1, T0)  # 2
    append("step/start", {"turn": 1, "step": 1})  # 3
    rig.clock.set(T0 + 1_000)
    append(
        "assistant/message",
        {"turn": 1, "step": 1, "content": [{"type": "text", "text": "ok"}]},
        surface_op="append",
    )  # 4
    append("step/end", {"turn": 1, "step": 1})  # 5
    append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})  # 6
    rig.clock.set(T0 + 10_000)
    append(
        "turn/start", {"turn": 2, "trigger": {"kind": "message", "source": {"kind": "user"}}}
    )  # 7
    append("user/message", user, surface_op="append")  # 8
    reading(2, 1, T0 + 10_000)  # 9
    rig.clock.set(T0 + 12_000)
    append("compact/start", {"turn": 2})  # 10
    append(
        "compact/summary",
        {
            "summary": [{"type": "text", "text": "they said hi twice"}],
            "shadowedRange": {"start": 1, "end": 9},
            "shadowedSeqs": [1, 2, 4, 8, 9],
            "shadowedTokenCount": 100,
            "model": "summarizer",
            "maxTokens": 1024,
        },
    )  # 11
    append(
        "user/message",
        {
            "content": [{"type": "text", "text": "checkpoint"}],
            "source": {"kind": "plugin", "plugin": "compact"},
        },
        surface_op={"op": "replace", "start": 1, "end": 9},
        source_event_seqs=[10, 11, 1, 2, 4, 8, 9],
    )  # 12
    append("compact/end", {"turn": 2})  # 13
    assert session.surface == (12,)
    return session


async def test_resumed_lookup_uses_shadowed_readings(rig: TimeContextRig) -> None:
    original = compacted_log(rig)
    rig.ctx.provide("session_store", MemoryStore({original.id: original}))
    await rig.load({"refreshIntervalMs": 60_000})
    agent = await rig.ctx.agent_loop.resume("main", original.id, model="m")
    session = agent.session
    assert session is not original and list(session.events) == list(original.events)
    assert not any("Time sampled" in str(m) for m in session.derive_messages())
    # Interval scheduling sees the shadowed turn-2 reading (T0 + 10 s) ...
    rig.clock.set(T0 + 69_999)
    assert await rig.reading(agent, 2, 2) is None
    # ... and so does the step-2 baseline.
    rig.clock.set(T0 + 70_000)
    assert await rig.reading(agent, 2, 2) == reading_line(2, 2, utc_stamp(T0 + 70_000), "1m 0s")


async def test_resumed_lookup_across_turns_in_the_real_loop(rig: TimeContextRig) -> None:
    original = compacted_log(rig)
    rig.clock.set(T0 + 13_000)
    original.append("turn/end", {"turn": 2, "reason": {"kind": "interrupted"}})
    rig.ctx.provide("session_store", MemoryStore({original.id: original}))
    adapter = rig.model
    await rig.load({"refreshIntervalMs": 60_000})
    agent = await rig.ctx.agent_loop.resume("main", original.id, model="m")

    rig.clock.set(T0 + 40_000)  # 30 s after the shadowed turn-2 reading: no new reading
    agent.send([{"type": "text", "text": "third"}])
    await agent.when_idle()
    assert len(adapter.requests) == 1
    assert not any("Time sampled" in str(m) for m in adapter.requests[0].messages)

    rig.clock.set(T0 + 70_000)  # 60 s after it: a reading, and the turn's prompt is its baseline
    agent.send([{"type": "text", "text": "fourth"}])
    await agent.when_idle()
    texts = reading_texts(agent.session)
    assert texts[2:] == [reading_line(4, 1, utc_stamp(T0 + 70_000), "0s")]
    assert str(adapter.requests[1].messages).count("Time sampled") == 1
