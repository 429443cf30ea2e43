"""time-context in the real agent loop: what the model is sent, and the turn order around it."""

from __future__ import annotations

from typing import Any

import pytest
from tc_support import SOURCE, TimeContextRig, reading_line, reading_texts, tc_rig, utc_stamp
from tests.support.clock import T0, Clock
from tests.support.rig import Rigs

from dsh.agent.agent import Agent
from dsh.llm.types import LlmRequest
from dsh.plugins import time_context
from dsh.testing import Reply, ScriptedAdapter
from dsh.tools import echo

CONTEXT_OPEN = {"type": "text", "text": '<context source="plugin">'}
CONTEXT_CLOSE = {"type": "text", "text": "</context>"}


def readings_in(request: LlmRequest) -> list[str]:
    """The reading texts a request carries, in order (each in its context wrapper)."""
    out = []
    for message in request.messages:
        content = message["content"]
        if content and content[0] == CONTEXT_OPEN:
            assert message["role"] == "user"
            assert len(content) == 3 and content[2] == CONTEXT_CLOSE
            if content[1]["text"].startswith("Time sampled"):
                out.append(content[1]["text"])
    return out


async def loop_rig(
    rigs: Rigs, clock: Clock, config: Any = None, replies: Any = (), listeners: Any = ()
) -> tuple[TimeContextRig, Agent, ScriptedAdapter]:
    """The shared rig with time-context (``config``) and the echo tool; one agent."""
    rig = await tc_rig(rigs, clock, *replies, listeners=listeners, plugins=[(time_context, config), echo])
    return rig, rig.agent(), rig.model


async def run(agent: Agent, text: str) -> None:
    agent.send([{"type": "text", "text": text}])
    await agent.when_idle()


def after(clock: Clock, ms: int, reply: Reply) -> Any:
    """A reply that first lets ``ms`` of model time pass."""

    def factory(_request: LlmRequest) -> Reply:
        clock.advance(ms)
        return reply

    return factory


@pytest.fixture
def dev_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every request must equal the log-derived history before its step/start.
    monkeypatch.setenv("DSH_DEV_CHECKS", "1")


async def test_cumulative_readings_in_multi_step_requests(rigs: Rigs, clock: Clock, dev_checks: None) -> None:
    rig, agent, adapter = await loop_rig(
        rigs,
        clock,
        replies=[
            after(
                clock,
                2_000,
                Reply(text="Let me echo that.", tool_calls=[("call-1", "echo", {"text": "hi"})]),
            ),
            after(clock, 1_000, Reply(text="The echo tool has spoken.")),
            after(clock, 3_000, Reply(text="You're welcome.")),
        ],
    )
    await run(agent, "echo hi")
    r1 = reading_line(1, 1, utc_stamp(T0), "0s")
    r2 = reading_line(1, 2, utc_stamp(T0 + 2_000), "2s")
    assert [readings_in(r) for r in adapter.requests] == [[r1], [r1, r2]]
    step2 = adapter.requests[1].messages
    assert [m["role"] for m in step2] == ["user", "user", "assistant", "user", "user"]
    assert step2[3]["content"][0]["type"] == "tool-result"
    assert step2[4]["content"] == [CONTEXT_OPEN, {"type": "text", "text": r2}, CONTEXT_CLOSE]

    rig.clock.advance(60_000)
    await run(agent, "thanks")
    r3 = reading_line(2, 1, utc_stamp(T0 + 63_000), "0s")
    assert readings_in(adapter.requests[2]) == [r1, r2, r3]
    assert reading_texts(agent.session) == [r1, r2, r3]

    # Each reading sits before its step's step/start (step 2's after step 1's step/end).
    kinds = [
        (e.type, e.data.get("step")) for e in agent.session.events if e.type != "assistant/chunk"
    ]
    assert kinds[:12] == [
        ("turn/start", None),
        ("user/message", None),
        ("context/message", None),
        ("step/start", 1),
        ("request/header", None),
        ("assistant/message", 1),
        ("tool/call", 1),
        ("tool/result", 1),
        ("step/end", 1),
        ("context/message", None),
        ("step/start", 2),
        ("assistant/message", 2),
    ]


async def test_readings_never_reach_system_prompt_or_header(rigs: Rigs, clock: Clock, dev_checks: None) -> None:
    _, agent, adapter = await loop_rig(
        rigs, clock, replies=[Reply(tool_calls=[("call-1", "echo", {"text": "x"})]), "ok", "ok"]
    )
    await run(agent, "one")
    await run(agent, "two")
    assert len(adapter.requests) == 3
    for request in adapter.requests:
        assert request.system and "Time sampled" not in request.system
        assert "time-context" not in str(request.tools)
    headers = [e for e in agent.session.events if e.type == "request/header"]
    assert [h.data["reason"] for h in headers] == ["initial"]  # readings never change the header
    assert "Time sampled" not in str(headers[0].data)


async def test_positive_interval_lets_requests_go_out_without_a_reading(rigs: Rigs, clock: Clock) -> None:
    _, agent, adapter = await loop_rig(
        rigs,
        clock,
        {"refreshIntervalMs": 60_000},
        replies=[after(clock, 2_000, Reply(tool_calls=[("call-1", "echo", {"text": "x"})])), "ok"],
    )
    await run(agent, "one")
    r1 = reading_line(1, 1, utc_stamp(T0), "0s")
    assert [readings_in(r) for r in adapter.requests] == [[r1], [r1]]
    assert reading_texts(agent.session) == [r1]


async def test_later_listener_cancel_keeps_the_reading(rigs: Rigs, clock: Clock) -> None:
    rig, agent, adapter = await loop_rig(rigs, clock)
    seen: list[bool] = []

    def cancel(agent: Agent, *_: Any) -> None:
        agent.cancel("x")

    def observe(
        _agent: Agent, _turn: int, _step: int, _system: str, _prefix: Any, signal: Any
    ) -> None:
        seen.append(signal.aborted)

    rig.ctx.on("agent/pre-step", cancel)
    rig.ctx.on("agent/pre-step", observe)
    await run(agent, "hi")
    events = list(agent.session.events)
    assert [e.type for e in events] == ["turn/start", "user/message", "context/message", "turn/end"]
    assert events[2].data["source"] == SOURCE
    assert events[3].data == {"turn": 1, "reason": {"kind": "aborted", "reason": "x"}}
    assert seen == [True]  # the cancel aborted the very signal later listeners get
    assert adapter.requests == []


async def test_later_listener_failure_keeps_the_reading(rigs: Rigs, clock: Clock) -> None:
    rig, agent, adapter = await loop_rig(rigs, clock)
    errors: list[Any] = []
    rig.ctx.on("agent/error", lambda *args: errors.append(args))

    def boom(*_: Any) -> None:
        raise RuntimeError("boom")

    remove = rig.ctx.on("agent/pre-step", boom)
    await run(agent, "hi")
    events = list(agent.session.events)
    assert [e.type for e in events] == ["turn/start", "user/message", "context/message", "turn/end"]
    assert events[3].data == {"turn": 1, "reason": {"kind": "error", "step": 1, "message": "boom"}}
    assert adapter.requests == []
    assert len(errors) == 1 and errors[0][1:3] == (1, 1)
    # The failed attempt's reading is history: the next turn's request carries it.
    remove()
    rig.clock.advance(5_000)
    await run(agent, "again")
    assert readings_in(adapter.requests[0]) == [
        reading_line(1, 1, utc_stamp(T0), "0s"),
        reading_line(2, 1, utc_stamp(T0 + 5_000), "0s"),
    ]


async def test_compaction_style_listener_sees_the_new_reading(rigs: Rigs, clock: Clock) -> None:
    """An ordinary listener registered *before* the plugin (as compaction is) runs after it."""
    counts: list[int] = []
    listener = ("agent/pre-step", lambda agent, *_: counts.append(len(reading_texts(agent.session))))
    _, agent, _ = await loop_rig(
        rigs, clock, replies=[Reply(tool_calls=[("c", "echo", {"text": "x"})]), "ok"], listeners=[listener]
    )
    await run(agent, "hi")
    assert counts == [1, 2]


async def test_every_agent_gets_its_own_readings(rig: TimeContextRig) -> None:
    await rig.load({"refreshIntervalMs": 60_000})
    a, b = rig.agent("a"), rig.agent("b")
    await run(a, "hi")
    rig.clock.advance(1_000)
    await run(b, "hi")
    assert reading_texts(a.session) == [reading_line(1, 1, utc_stamp(T0), "0s")]
    assert reading_texts(b.session) == [reading_line(1, 1, utc_stamp(T0 + 1_000), "0s")]
