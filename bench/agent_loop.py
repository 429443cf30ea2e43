"""loop: harness time per step of one agent over 1,000 turns, and whether it grows.

One agent on a ``Context`` with the agent spine (``dsh.testing.mount_agent_loop``), the
``time-context`` plugin (default interval: a reading before every step), the ``jsonl-sessions``
plugin (a flush with fsync at every turn end, on ext4) and one trivial tool (``noop``). The model
is a zero-latency :class:`~dsh.testing.ScriptedAdapter`: each turn is a tool-call step (one text
delta, then a ``noop`` call) and a text step (a 48-character reply in 4 deltas). ``DSH_DEV_CHECKS``
is removed from the environment first, so the development invariant check is off.

Each turn (``agent.send`` then ``await agent.when_idle()``) is timed with
``time.perf_counter``. ``ms_per_step`` is the wall time of all turns / 2,000 steps;
``late_early_ratio`` is the mean turn time of the last 100 turns / the first 100 (the same as
per step, at two steps a turn). The full run repeats the 1,000 turns 3 times (fresh context and
directory each) and reports the median of each figure; ``quick`` runs them once. Because one
stalled turn moves a 100-turn mean a lot on a shared machine, ``late_early_ratio_of_medians``
(median turn time of the last 100 / the first 100) is reported beside it, and so is every full
(generation-2) garbage collection during the turns, as ``[turn index, ms]`` (``full_gc_pauses``,
one list per run): such a pause costs 30-110 ms here, and one landing in the last 100 turns is
enough to move their mean by half. ``gc.collect()`` runs before each run's first turn. Every turn adds 29 events (the first also a
``request/header``): 29,001 events at the end. The time spent in ``ctx.sessions.flush`` (write and
fsync) is also reported apart, with the per-step figure net of it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench._util import median, scratch_dir
from dsh.llm.types import LlmRequest
from dsh.persistence import jsonl
from dsh.plugins import time_context
from dsh.runtime import Context
from dsh.testing import Reply, ScriptedAdapter, mount_agent_loop
from dsh.tools import define_tool

TURNS = 1_000
STEPS_PER_TURN = 2
MODEL = "scripted"
REPLY = "All done: the tool ran and reported that it was ok."[:48]


def _noop(args: Any, call: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": "ok"}]


def _reply(request: LlmRequest) -> Reply:
    """The closing text when a tool result follows the latest prompt, else a ``noop`` call.

    Looks back past the time-context reading that precedes every request.
    """
    for message in reversed(request.messages):
        blocks = message["content"]
        if any(block.get("type") == "tool-result" for block in blocks):
            return Reply(text=REPLY, deltas=4)
        if message["role"] == "user" and not blocks[0].get("text", "").startswith("<"):
            break
    call_id = f"call-{len(request.messages)}"
    return Reply(text="Let me check.", tool_calls=[(call_id, "noop", {})])


def _time_flushes(ctx: Context) -> list[float]:
    """Time every ``ctx.sessions.flush`` and ``checkpoint`` (each model call, each tool call, each
    turn end)."""
    service = ctx.sessions
    flush = service.flush
    durations: list[float] = []

    async def timed(session: Any) -> None:
        start = time.perf_counter()
        try:
            await flush(session)
        finally:
            durations.append(time.perf_counter() - start)

    service.flush = timed  # an instance attribute: the loop looks ``flush`` up on each call
    checkpoint = service.checkpoint

    async def timed_checkpoint(session: Any) -> None:
        start = time.perf_counter()
        try:
            await checkpoint(session)
        finally:
            durations.append(time.perf_counter() - start)

    service.checkpoint = timed_checkpoint
    return durations


class _FullCollections:
    """A ``gc.callbacks`` hook: ``[turn index, ms]`` of every full (generation 2) collection."""

    def __init__(self, times: list[float]) -> None:
        self.times = times
        self.pauses: list[list[float]] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            elapsed = (time.perf_counter() - self._start) * 1000
            self.pauses.append([len(self.times), round(elapsed, 1)])


async def _measure(root: str, turns: int, mount: Callable[[Context], Awaitable[object]] | None = None) -> dict[str, Any]:
    os.environ.pop("DSH_DEV_CHECKS", None)
    ctx = Context()
    if mount is not None:  # more plugins before the spine (bench.telemetry mounts tracing)
        await mount(ctx)
    await mount_agent_loop(ctx, loop_config={"freezeHistory": True})  # as `dsh chat` runs it
    await ctx.plugin(time_context, {"timeZone": "UTC"})
    await ctx.plugin(jsonl, {"root": root})
    assert ctx.agent_loop.dev_checks is False
    flushes = _time_flushes(ctx)
    ctx.tools.register(define_tool(name="noop", description="Does nothing.", execute=_noop))
    adapter = ScriptedAdapter()
    adapter.register(ctx, MODEL)
    agent = ctx.agent_loop.create("bench", model=MODEL, cwd="/bench")
    perf = time.perf_counter
    times: list[float] = []
    full_gcs = _FullCollections(times)
    gc.collect()  # garbage left by earlier work is not this run's to collect
    gc.callbacks.append(full_gcs)
    try:
        for turn in range(1, turns + 1):
            adapter.add(_reply, _reply)  # this turn's two steps (the queue never grows)
            start = perf()
            agent.send([{"type": "text", "text": f"Turn {turn}: run the noop tool, then report."}])
            await agent.when_idle()
            times.append(perf() - start)
    finally:
        gc.callbacks.remove(full_gcs)
    session = agent.session
    ends = [e for e in session.events if e.type == "turn/end"]
    steps = sum(1 for e in session.events if e.type == "step/start")
    assert len(ends) == turns and all(e.data["reason"]["kind"] == "completed" for e in ends)
    assert steps == turns * STEPS_PER_TURN, steps
    events = len(session)
    # A checkpoint before each model call and before the turn's one tool call, then the turn-end
    # flush.
    loop = ctx.agent_loop
    per_turn = 1 + (STEPS_PER_TURN if loop.checkpoint_before_model else 0) + (1 if loop.checkpoint_before_tools else 0)
    await ctx.dispose()
    assert len(flushes) == turns * per_turn, (len(flushes), turns)
    turn_flushes = [sum(flushes[i * per_turn : (i + 1) * per_turn]) for i in range(turns)]
    net = [total - flush for total, flush in zip(times, turn_flushes, strict=True)]
    window = min(100, turns // 2)

    def per_step_ms(values: list[float]) -> float:
        return sum(values) / (len(values) * STEPS_PER_TURN) * 1000

    early, late = per_step_ms(times[:window]), per_step_ms(times[-window:])
    early_net, late_net = per_step_ms(net[:window]), per_step_ms(net[-window:])
    return {
        "ms_per_step": round(sum(times) / steps * 1000, 4),
        "late_early_ratio": round(late / early, 3),
        "turns": turns,
        "events": events,
        "early_ms_per_step": round(early, 4),
        "late_ms_per_step": round(late, 4),
        "flush_ms_per_turn": round(sum(flushes) / turns * 1000, 4),
        "flushes_per_turn": per_turn,
        "ms_per_step_excluding_flush": round(per_step_ms(net), 4),
        "late_early_ratio_excluding_flush": round(late_net / early_net, 3),
        # Medians resist the odd stall a shared machine inflicts on one turn.
        "late_early_ratio_of_medians": round(median(times[-window:]) / median(times[:window]), 3),
        "full_gc_pauses": full_gcs.pauses,
    }


def run(quick: bool) -> dict[str, Any]:
    """Medians over 3 runs of the 1,000 turns (1 run with ``quick``), figure by figure."""
    runs = []
    for _ in range(1 if quick else 3):
        with scratch_dir("loop") as root:
            runs.append(asyncio.run(_measure(root, TURNS)))
    figures = [key for key, value in runs[0].items() if isinstance(value, float)]
    result: dict[str, Any] = {key: median([r[key] for r in runs]) for key in figures}
    result.update(
        turns=TURNS,
        events=runs[0]["events"],
        runs=len(runs),
        full_gc_pauses=[r["full_gc_pauses"] for r in runs],
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--turns", type=int, default=TURNS)
    args = parser.parse_args()
    with scratch_dir("loop") as root:
        print(json.dumps(asyncio.run(_measure(root, args.turns)), indent=2))


if __name__ == "__main__":
    main()
