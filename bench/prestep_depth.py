"""Cost of one time-context pre-step firing as the session grows (10^3 .. 10^6 events).

The case is the reference's worst one for a backward scan: step 2 of an open turn,
``refreshIntervalMs: 60000``, and no reading anywhere in the log, so a literal implementation
walks the whole log to learn that a reading is due. Each session is built with
``Session.restore`` from synthetic turns (``turn/start``, ``user/message``, ``step/start``,
``assistant/message``, ``step/end``, ``turn/end``; the last turn open after step 1), published on
a real ``Context`` with the agent spine and the plugin, and given a real ``Agent``. Building the
plugin's index (when the agent appears) is not timed.

What is timed, with ``time.perf_counter_ns``: one call of the plugin's ``agent/pre-step``
listener, i.e. the due-check, the baseline lookup, rendering, and ``agent.inject`` (the validated
``context/message`` append, its surface and derived-message update, and the ``session/event``
publication). The log is append-only, so each repetition leaves its reading behind; the clock
(``dsh._clock.now_ms``, patched) advances 60 s before every repetition so that every firing
injects. The first firing on each session is the literal no-earlier-reading case and is shown
separately, as one cold sample (the 10^3 session goes first, so it also pays the process's
warm-up). The reported figure is the median over all repetitions (3000 per size, 300 with
``quick``), taken in rounds that alternate between the sizes, GC paused while timing (as
``timeit`` does).

``run(quick)`` returns ``{"1000": us, "10000": us, "100000": us, "1000000": us, "ratio": ...}``
(microseconds; ratio = 10^6 / 10^3). ``python -m bench.prestep_depth [--quick]`` prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from typing import Any
from unittest import mock

from dsh import _clock
from dsh.agent.agent import Agent, AgentOptions
from dsh.plugins import time_context
from dsh.runtime import AbortController, Context
from dsh.session import Event, Session
from dsh.testing import mount_agent_loop

SIZES = (1_000, 10_000, 100_000, 1_000_000)
T0 = 1_783_987_200_000
INTERVAL_MS = 60_000
TRIGGER = {"kind": "message", "source": {"kind": "user"}}
USER = {
    "content": [{"type": "text", "text": "please continue with the next part"}],
    "source": {"kind": "user"},
}
COMPLETED = {"kind": "completed"}


def synthetic_events(n: int) -> tuple[list[Event], int]:
    """Exactly ``n`` events of complete turns plus one open turn whose step 1 has ended, and no
    time-context reading; returns the events and the open turn's number. Read-only payloads are
    shared between events to keep 10^6 events in memory cheaply."""
    if n < 5:
        raise ValueError("need at least 5 events")
    full_turns, padding = divmod(n - 5, 6)
    events: list[Event] = []
    add = events.append
    time_ms = T0
    reply = {"turn": 0, "step": 1, "content": [{"type": "text", "text": "Here is the next part."}]}
    for turn in range(1, full_turns + 2):
        step = {"turn": turn, "step": 1}
        seq = len(events)
        add(Event("turn/start", seq, time_ms, {"turn": turn, "trigger": TRIGGER}))
        add(Event("user/message", seq + 1, time_ms, USER, None, "append"))
        add(Event("step/start", seq + 2, time_ms, step))
        time_ms += 1_000
        if turn > full_turns:  # the open turn: pad inside its step, then stop after step/end
            chunk = {
                "turn": turn,
                "step": 1,
                "chunk": {"type": "text-delta", "index": 0, "text": "x"},
            }
            for _ in range(padding):
                add(Event("assistant/chunk", len(events), time_ms, chunk))
        add(Event("assistant/message", len(events), time_ms, reply, None, "append"))
        add(Event("step/end", len(events), time_ms, step))
        if turn <= full_turns:
            add(Event("turn/end", len(events), time_ms, {"turn": turn, "reason": COMPLETED}))
        time_ms += 10_000
    assert len(events) == n
    return events, full_turns + 1


class _Rig:
    """One session of ``n`` events with a real agent, the plugin loaded and its index built."""

    def __init__(self, ctx: Context, session: Session, agent: Agent, turn: int) -> None:
        self.ctx = ctx
        self.session = session
        self.agent = agent
        self.turn = turn
        self.listener = ctx.time_context.on_pre_step
        self.signal = AbortController().signal
        self.now = session.events[-1].time
        self.samples: list[int] = []


async def _build(n: int) -> _Rig:
    events, turn = synthetic_events(n)
    ctx = Context()
    await mount_agent_loop(ctx)
    await ctx.plugin(time_context, {"refreshIntervalMs": INTERVAL_MS, "timeZone": "UTC"})
    session = Session.restore(f"bench-{n}", events, header={"id": f"bench-{n}", "createdAt": T0})
    ctx.sessions.adopt(session)
    agent = Agent(ctx, "bench", session, AgentOptions(model="m"))
    ctx.agents.register(agent)
    ctx.emit("agent/created", agent)  # the plugin builds this session's index here
    assert session.open_turn == turn
    return _Rig(ctx, session, agent, turn)


def _fire(rig: _Rig, count: int, clock: list[int]) -> None:
    """``count`` timed firings, each 60 s after the previous one (so each one injects)."""
    perf = time.perf_counter_ns
    session, listener, agent, turn, signal = (
        rig.session,
        rig.listener,
        rig.agent,
        rig.turn,
        rig.signal,
    )
    samples = rig.samples
    clock[0] = rig.now
    for _ in range(count):
        clock[0] += INTERVAL_MS
        before = len(session)
        start = perf()
        listener(agent, turn, 2, "", [], signal)
        samples.append(perf() - start)
        if len(session) != before + 1:
            raise AssertionError("a firing did not inject; the measurement would be wrong")
    rig.now = clock[0]


async def _measure(
    sizes: tuple[int, ...], rounds: int, per_round: int
) -> dict[int, tuple[float, float]]:
    """``{n: (median µs, first-firing µs)}``. Sizes take turns, round by round, so a noisy
    neighbour on a shared machine slows every size alike instead of skewing the ratio."""
    rigs = [await _build(n) for n in sizes]
    clock = [0]
    gc.collect()
    gc.disable()
    try:
        with mock.patch.object(_clock, "now_ms", lambda: clock[0]):
            for _ in range(rounds):
                for rig in rigs:
                    _fire(rig, per_round, clock)
    finally:
        gc.enable()
    result = {}
    for n, rig in zip(sizes, rigs, strict=True):
        result[n] = (statistics.median(rig.samples) / 1_000, rig.samples[0] / 1_000)
        await rig.ctx.dispose()
    return result


def _run(quick: bool) -> tuple[dict[str, float], dict[str, float]]:
    rounds, per_round = (5, 60) if quick else (10, 300)
    measured = asyncio.run(_measure(SIZES, rounds, per_round))
    medians = {str(n): round(measured[n][0], 2) for n in SIZES}
    firsts = {str(n): round(measured[n][1], 2) for n in SIZES}
    result: dict[str, float] = dict(medians)
    result["ratio"] = round(medians[str(SIZES[-1])] / medians[str(SIZES[0])], 3)
    return result, firsts


def run(quick: bool) -> dict[str, Any]:
    """Median µs per firing at each size, and the 10^6 / 10^3 ratio."""
    return dict(_run(quick)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="300 repetitions per size instead of 3000"
    )
    args = parser.parse_args()
    result, firsts = _run(args.quick)
    print("time-context pre-step firing (step 2, refreshIntervalMs 60000, reading injected)")
    print(f"{'events':>10}  {'median µs':>10}  {'first µs':>10}   (first: one cold sample)")
    for n in SIZES:
        print(f"{n:>10,}  {result[str(n)]:>10.2f}  {firsts[str(n)]:>10.2f}")
    verdict = "ok" if result["1000000"] <= 50 and result["ratio"] <= 2 else "MISSED"
    print(
        f"ratio 10^6/10^3: {result['ratio']:.3f}  (targets: <= 50 µs at 10^6, ratio <= 2: {verdict})"
    )


if __name__ == "__main__":
    main()
