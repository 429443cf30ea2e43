"""compact end to end: 200 turns against the echo model with a small context window."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from tests.support.clock import Clock
from tests.support.rig import Rigs

from dsh.llm import echo
from dsh.llm.types import LlmRequest
from dsh.plugins import compact, time_context
from dsh.session import Event, Session
from dsh.testing import Reply, ScriptedAdapter
from dsh.tools import echo as echo_tool

T0 = 1_783_990_800_000
TURNS = 200
WINDOW = 2000


@pytest.fixture
def clock_start() -> int:
    return T0


def prompt(i: int, with_time: bool) -> str:
    # Without time-context the echo model sees the prompt itself, so "echo …" makes tool calls.
    if not with_time and i % 3 == 0:
        return f"echo note {i} for the log"
    return f"Message {i}: keep going with the plan for step {i}."


@pytest.mark.slow
@pytest.mark.parametrize("with_time", [True, False], ids=["time-context", "tool-calls"])
async def test_two_hundred_turns_stay_under_the_window(
    clock: Clock, rigs: Rigs, caplog: pytest.LogCaptureFixture, with_time: bool
) -> None:
    compact_config = {
        "contextWindow": WINDOW,
        "thresholdRatio": 0.5,
        "retainTokens": 300,
        "summarizationModel": "summarizer",
        "maxTokens": 256,
        "compactionRetries": 1,
    }
    summarizer = ScriptedAdapter(
        default=Reply(text="Earlier: numbered messages, each answered by the echo model.")
    )
    time = [(time_context, {"timeZone": "UTC"})] if with_time else []
    rig = await rigs.make(
        models=(),
        adapters={"summarizer": summarizer},
        plugins=[(echo, {"delayMs": 0}), echo_tool, *time, (compact, compact_config)],
        clock=clock,
    )
    ctx = rig.ctx
    requests: list[LlmRequest] = []

    async def record(request: LlmRequest, next_: Any) -> Any:
        if request.model == "mock-echo":
            requests.append(request)
        return await next_()

    ctx.on("llm/stream", record)
    published: list[int] = []
    ctx.on("session/event", lambda session, event: published.append(event.seq))
    agent = ctx.agent_loop.create("main", model="mock-echo", session_id="e2e")
    session = agent.session
    step_starts: list[Event] = []
    session.subscribe(lambda s, e: step_starts.append(e) if e.type == "step/start" else None)
    estimator = ctx.compact.estimator
    threshold = ctx.compact.threshold
    for i in range(TURNS):
        clock.advance(37_000)
        agent.send([{"type": "text", "text": prompt(i, with_time)}])
        await agent.when_idle()

    events = list(session.events)
    # Several compactions, none failed, nothing logged.
    ends = [e for e in events if e.type == "compact/end"]
    assert len(ends) >= 5, len(ends)
    assert all("error" not in e.data for e in ends)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert session.last_turn == TURNS
    # Every request stayed under the threshold, hence under the window.
    assert len(requests) == len(step_starts)
    sizes = [estimator.request(r.system, [], r.messages) for r in requests]
    assert max(sizes) < threshold < WINDOW
    # The raw log keeps every event: contiguous, all published, every prompt and reading.
    assert [e.seq for e in events] == list(range(len(events))) == published
    prompts = [
        e.data["content"][0]["text"]
        for e in events
        if e.type == "user/message" and e.data["source"] == {"kind": "user"}
    ]
    assert prompts == [prompt(i, with_time) for i in range(TURNS)]
    readings = [e for e in events if time_context.is_reading(e)]
    assert len(readings) == (len(step_starts) if with_time else 0)
    shadowed = {
        s for e in events if e.type == "compact/summary" for s in e.data["shadowedSeqs"]
    }
    assert not shadowed & set(session.surface)
    if with_time:
        assert sum(r.seq in shadowed for r in readings) > len(readings) // 2
    else:
        assert sum(e.type == "tool/result" for e in events) == len(range(0, TURNS, 3))
    # Re-deriving from the raw events reproduces the live history, and each checked request
    # equals the history derived from the log before its step.
    rederived = Session("x", [e.to_json() for e in events]).derive_messages()
    assert rederived == session.derive_messages()
    for request, start in list(zip(requests, step_starts, strict=True))[-5:]:
        assert (
            list(request.messages)
            == Session("y", events[: start.seq]).derive_messages().to_list()
        )
    # Each checkpoint says which wall-clock span it covers, from the raw times underneath.
    checkpoints = [
        e for e in events if e.type == "user/message" and e.data["source"] == compact.SOURCE
    ]
    first_covers = checkpoints[0].data["content"][0]["text"].split("\n\n")[1]
    assert first_covers.startswith("Covers 2026-07-14T01:00:37+00:00 to ")
    last_covers = checkpoints[-1].data["content"][0]["text"].split("\n\n")[1]
    assert last_covers.startswith("Covers 2026-07-14T01:00:37+00:00 to ")
