"""Agent control: cancel, steer, inject, when_idle, status, disposal and flushing (docs/agent-loop.md)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from agent_support import idle, of_type, outline, text, turn_ends
from tests.support.rig import make_rig
from tests.support.wait import stays, wait_until

from dsh.agent import AgentDisposedError
from dsh.runtime import AbortSignal
from dsh.testing import Reply
from dsh.tools import define_tool

SLOW = Reply(text="abcdefghijklmnopqrst", deltas=20, delay=0.5)


def _has_delta(session: Any) -> bool:
    """The step is streaming (its first chunk is logged)."""
    return any(e.type == "assistant/chunk" for e in session.events)


# -- cancel --------------------------------------------------------------------------------------


@pytest.mark.perf
async def test_cancel_during_a_slow_stream_aborts_promptly_with_the_reason() -> None:
    rig = await make_rig(SLOW, "next")
    try:
        agent = rig.agent()
        agent.send(text("x"))
        await wait_until(lambda: _has_delta(agent.session))
        started = time.monotonic()
        agent.cancel("stop typing")
        await idle(agent)
        assert time.monotonic() - started < 0.3
        assert outline(agent.session) == [
            "turn/start", "user/message", "step/start", "request/header", "chunk*1", "step/end", "turn/end",
        ]
        assert turn_ends(agent.session) == [{"kind": "aborted", "reason": "stop typing"}]
        assert rig.model.requests[0].signal is not None
        assert rig.model.requests[0].signal.aborted
        assert agent.status == "idle"
        # The agent takes the next prompt normally.
        agent.send(text("y"))
        await idle(agent)
        assert turn_ends(agent.session)[1] == {"kind": "completed"}
    finally:
        await rig.ctx.dispose()


async def test_cancel_default_reason_is_cancelled() -> None:
    rig = await make_rig(SLOW)
    try:
        agent = rig.agent()
        agent.send(text("x"))
        await wait_until(lambda: _has_delta(agent.session))
        agent.cancel()
        await idle(agent)
        assert turn_ends(agent.session) == [{"kind": "aborted", "reason": "cancelled"}]
    finally:
        await rig.ctx.dispose()


@pytest.mark.perf
async def test_cancel_during_a_slow_tool_records_its_result_and_aborts() -> None:
    started = asyncio.Event()
    signals: list[AbortSignal] = []

    async def slow(args: Any, call: Any) -> list[dict[str, Any]]:
        signals.append(call.signal)
        started.set()
        await asyncio.sleep(30)  # ignores its signal on purpose
        return text("never")

    rig = await make_rig(Reply(tool_calls=[("c1", "slow", {}), ("c2", "slow", {})]), "next")
    try:
        rig.ctx.tools.register(define_tool(name="slow", description="slow", execute=slow))
        agent = rig.agent()
        agent.send(text("x"))
        await asyncio.wait_for(started.wait(), 2)
        began = time.monotonic()
        agent.cancel("enough")
        await idle(agent)
        assert time.monotonic() - began < 0.3
        assert signals[0].aborted and signals[0].reason == "enough"
        assert outline(agent.session)[-5:] == ["assistant/message", "tool/call", "tool/result", "step/end", "turn/end"]
        call, result = of_type(agent.session, "tool/call")[0], of_type(agent.session, "tool/result")[0]
        assert result.data == {
            "turn": 1, "step": 1, "callId": "c1", "content": text("Error: enough"), "isError": True,
        }
        assert list(result.source_event_seqs or ()) == [call.seq]
        assert turn_ends(agent.session) == [{"kind": "aborted", "reason": "enough"}]
        # The second call never ran; the next turn's history pairs every call with a result.
        assert len(signals) == 1
        agent.send(text("y"))
        await idle(agent)
        assert turn_ends(agent.session)[1] == {"kind": "completed"}
    finally:
        await rig.ctx.dispose()


async def test_tool_honouring_its_signal_reports_its_own_result() -> None:
    async def polite(args: Any, call: Any) -> list[dict[str, Any]]:
        await call.signal.wait()
        return text("stopped politely")

    rig = await make_rig(Reply(tool_calls=[("c1", "polite", {})]))
    try:
        rig.ctx.tools.register(define_tool(name="polite", description="p", execute=polite))
        agent = rig.agent()
        agent.send(text("x"))
        await wait_until(lambda: bool(of_type(agent.session, "tool/call")))
        agent.cancel("halt")
        await idle(agent)
        assert [e.data for e in of_type(agent.session, "tool/result")] == [
            {"turn": 1, "step": 1, "callId": "c1", "content": text("stopped politely"), "isError": False}
        ]
        assert outline(agent.session)[-3:] == ["tool/result", "step/end", "turn/end"]
        assert turn_ends(agent.session) == [{"kind": "aborted", "reason": "halt"}]
    finally:
        await rig.ctx.dispose()


async def test_tool_abort_grace_is_configurable() -> None:
    async def slow_to_stop(args: Any, call: Any) -> list[dict[str, Any]]:
        await call.signal.wait()
        await asyncio.sleep(0.05)  # honours the signal, but takes its time
        return text("late but polite")

    for grace, expected in ((0, "Error: now"), (2000, "late but polite")):
        rig = await make_rig(Reply(tool_calls=[("c1", "s", {})]), loop_config={"toolAbortGraceMs": grace})
        try:
            rig.ctx.tools.register(define_tool(name="s", description="s", execute=slow_to_stop))
            agent = rig.agent()
            agent.send(text("x"))
            await wait_until(lambda a=agent: bool(of_type(a.session, "tool/call")))
            agent.cancel("now")
            await idle(agent)
            assert of_type(agent.session, "tool/result")[0].data["content"] == text(expected)
            assert turn_ends(agent.session) == [{"kind": "aborted", "reason": "now"}]
        finally:
            await rig.ctx.dispose()


async def test_idle_cancel_is_a_no_op() -> None:
    rig = await make_rig("reply")
    try:
        agent = rig.agent()
        agent.cancel("nothing to do")
        assert agent.cancel_reason is None
        agent.send(text("x"))
        await idle(agent)
        assert turn_ends(agent.session) == [{"kind": "completed"}]
    finally:
        await rig.ctx.dispose()


async def test_cancel_clears_queued_messages() -> None:
    rig = await make_rig(SLOW, "after")
    try:
        agent = rig.agent()
        agent.send(text("first"))
        await wait_until(lambda: _has_delta(agent.session))
        agent.send(text("queued 1"))
        agent.send(text("queued 2"))
        agent.cancel("drop all")
        await idle(agent)
        assert len(of_type(agent.session, "turn/start")) == 1
        assert [e.data["content"] for e in of_type(agent.session, "user/message")] == [text("first")]
        agent.send(text("fresh"))
        await idle(agent)
        assert turn_ends(agent.session) == [{"kind": "aborted", "reason": "drop all"}, {"kind": "completed"}]
    finally:
        await rig.ctx.dispose()


async def test_cancel_before_the_driver_wakes_drops_the_batch_but_not_later_sends() -> None:
    rig = await make_rig("only this")
    try:
        agent = rig.agent()
        agent.send(text("dropped"))
        agent.cancel("changed my mind")
        agent.send(text("kept"))
        await idle(agent)
        assert [e.data["content"] for e in of_type(agent.session, "user/message")] == [text("kept")]
        assert turn_ends(agent.session) == [{"kind": "completed"}]
    finally:
        await rig.ctx.dispose()


async def test_cancel_before_the_driver_wakes_with_nothing_else_runs_no_turn() -> None:
    rig = await make_rig()
    try:
        agent = rig.agent()
        agent.send(text("dropped"))
        agent.cancel()
        await idle(agent)
        await stays(lambda: len(agent.session.events) == 0, 0.01, what="no turn")
        assert agent.status == "idle"
    finally:
        await rig.ctx.dispose()


async def test_status_listener_that_cancels_sends_the_agent_back_to_idle() -> None:
    rig = await make_rig("later")
    statuses: list[str] = []
    cancel_once = True

    def on_status(agent: Any, status: str) -> None:
        nonlocal cancel_once
        statuses.append(status)
        if status == "running" and cancel_once:
            cancel_once = False
            agent.cancel("veto")

    rig.ctx.on("agent/status", on_status)
    try:
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        assert len(agent.session.events) == 0
        assert statuses == ["running", "idle"]
        agent.send(text("y"))
        await idle(agent)
        assert turn_ends(agent.session) == [{"kind": "completed"}]
    finally:
        await rig.ctx.dispose()


# -- steering ------------------------------------------------------------------------------------


async def test_steering_during_a_step_is_appended_after_it_and_continues_the_turn() -> None:
    rig = await make_rig(Reply(text="abcd", deltas=4, delay=0.03), "steered reply")
    queued: list[Any] = []
    rig.ctx.on("agent/queued", lambda *args: queued.append(args[1:]))
    try:
        agent = rig.agent()
        agent.send(text("x"))
        await wait_until(lambda: _has_delta(agent.session))
        agent.steer(text("also consider y"), source={"kind": "plugin", "plugin": "p"})
        await idle(agent)
        assert outline(agent.session) == [
            "turn/start", "user/message", "step/start", "request/header", "chunk*8", "assistant/message",
            "steering/message", "step/end", "step/start", "chunk*5", "assistant/message", "step/end",
            "turn/end",
        ]
        steering = of_type(agent.session, "steering/message")[0]
        assert steering.data == {
            "turn": 1, "content": text("also consider y"), "source": {"kind": "plugin", "plugin": "p"},
        }
        assert steering.surface_op == "append"
        assert rig.model.requests[1].messages[-1] == {
            "role": "user",
            "content": [
                {"type": "text", "text": '<steering source="plugin">'},
                *text("also consider y"),
                {"type": "text", "text": "</steering>"},
            ],
        }
        assert queued[1] == (
            text("also consider y"), {"source": {"kind": "plugin", "plugin": "p"}, "steering": True},
        )
        assert turn_ends(agent.session) == [{"kind": "completed"}]
    finally:
        await rig.ctx.dispose()


async def test_steering_before_a_step_is_drained_before_step_start() -> None:
    rig = await make_rig(Reply(tool_calls=[("c", "t", {})]), "done")

    def tool(args: Any, call: Any) -> list[dict[str, Any]]:
        call.agent.steer(text("mid-tool note"))
        return text("r")

    try:
        rig.ctx.tools.register(define_tool(name="t", description="t", execute=tool))
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        types = outline(agent.session)
        at = types.index("steering/message")
        assert types[at - 1] == "tool/result" and types[at + 1] == "step/end"
        assert len(of_type(agent.session, "steering/message")) == 1
    finally:
        await rig.ctx.dispose()


async def test_steer_while_idle_behaves_like_send() -> None:
    rig = await make_rig("reply")
    queued: list[Any] = []
    rig.ctx.on("agent/queued", lambda *args: queued.append(args[2]))
    try:
        agent = rig.agent()
        agent.steer(text("idle steer"))
        await idle(agent)
        assert outline(agent.session)[:2] == ["turn/start", "user/message"]
        assert queued == [{"source": {"kind": "user"}, "steering": False}]
    finally:
        await rig.ctx.dispose()


async def test_leftover_steering_becomes_the_next_turns_prompt() -> None:
    rig = await make_rig("one", "two")
    try:
        agent = rig.agent()
        steered = False

        def on_flush(session: Any) -> None:
            nonlocal steered
            if not steered:
                steered = True
                agent.steer(text("late note"))

        rig.ctx.on("session/flush", on_flush)
        agent.send(text("x"))
        await idle(agent)
        assert len(of_type(agent.session, "turn/start")) == 2
        assert of_type(agent.session, "user/message")[1].data["content"] == text("late note")
        assert of_type(agent.session, "steering/message") == []
    finally:
        await rig.ctx.dispose()


# -- inject --------------------------------------------------------------------------------------


async def test_inject_while_idle_is_a_one_shot_turn_and_is_flushed() -> None:
    rig = await make_rig("reply")
    flushed: list[int] = []
    rig.ctx.on("session/flush", lambda session: flushed.append(len(session.events)))
    try:
        agent = rig.agent()
        agent.inject(text("note"), source={"kind": "plugin", "plugin": "p"}, envelope="raw", meta={"a": 1})
        assert outline(agent.session) == ["turn/start", "context/message", "turn/end"]
        assert [e.data for e in agent.session.events] == [
            {"turn": 1, "trigger": {"kind": "injection", "source": {"kind": "plugin", "plugin": "p"}}},
            {"content": text("note"), "source": {"kind": "plugin", "plugin": "p"}, "envelope": "raw", "meta": {"a": 1}},
            {"turn": 1, "reason": {"kind": "completed"}},
        ]
        assert agent.status == "idle"
        assert rig.model.requests == []
        await wait_until(lambda: flushed == [3])
        # Numbering continues after the injection turn, and the model sees the note.
        agent.send(text("x"))
        await idle(agent)
        assert of_type(agent.session, "turn/start")[1].data["turn"] == 2
        assert rig.model.requests[0].messages == [
            {"role": "user", "content": text("note")},
            {"role": "user", "content": text("x")},
        ]
    finally:
        await rig.ctx.dispose()


async def test_inject_while_running_appends_into_the_open_turn() -> None:
    rig = await make_rig(Reply(text="abc", deltas=3, delay=0.03))
    try:
        agent = rig.agent()
        agent.send(text("x"))
        await wait_until(lambda: _has_delta(agent.session))
        agent.inject(text("live note"))
        await idle(agent)
        types = outline(agent.session)
        assert types.count("turn/start") == 1
        assert "context/message" in types
        assert types.index("context/message") < types.index("assistant/message")
        assert of_type(agent.session, "context/message")[0].data == {
            "content": text("live note"), "source": {"kind": "user"},
        }
    finally:
        await rig.ctx.dispose()


async def test_inject_flush_failure_is_reported_not_raised() -> None:
    rig = await make_rig()
    errors: list[Any] = []
    rig.ctx.on("agent/error", lambda *args: errors.append(args))

    def broken(session: Any) -> None:
        raise OSError("disk gone")

    rig.ctx.on("session/flush", broken)
    try:
        agent = rig.agent()
        agent.inject(text("note"))
        await wait_until(lambda: bool(errors))
        assert errors[0][:3] == (agent, 1, 0)
        assert isinstance(errors[0][3], OSError)
    finally:
        await rig.ctx.dispose()


# -- when_idle and status ------------------------------------------------------------------------


async def test_when_idle_semantics() -> None:
    rig = await make_rig(Reply(text="ab", deltas=2, delay=0.02), "second")
    try:
        agent = rig.agent()
        await asyncio.wait_for(agent.when_idle(), 0.1)  # idle, nothing queued: immediate
        agent.send(text("x"))
        waiter = asyncio.ensure_future(agent.when_idle())
        await asyncio.sleep(0)
        assert not waiter.done()  # queued counts as work even before the driver runs
        await wait_until(lambda: agent.status == "running")
        agent.send(text("y"))  # queued during the turn: the agent stays running
        await asyncio.wait_for(waiter, 2)
        assert agent.status == "idle"
        assert len(of_type(agent.session, "turn/end")) == 2
    finally:
        await rig.ctx.dispose()


# -- disposal ------------------------------------------------------------------------------------


@pytest.mark.perf
async def test_disposing_mid_turn_ends_it_disposed() -> None:
    rig = await make_rig(SLOW)
    rig.record("agent/disposed", "agent/status")
    try:
        agent = rig.agent()
        session = agent.session
        agent.send(text("x"))
        await wait_until(lambda: _has_delta(session))
        started = time.monotonic()
        await asyncio.wait_for(agent.dispose(), 1)
        assert time.monotonic() - started < 0.3
        assert outline(session)[-2:] == ["step/end", "turn/end"]
        assert turn_ends(session) == [{"kind": "disposed"}]
        assert agent.status == "disposed"
        assert rig.ctx.agents.get("main") is None
        assert rig.ctx.sessions.get(session.id) is None
        assert ("agent/disposed", agent) in rig.bus
        assert ("agent/status", agent, "disposed") in rig.bus
        with pytest.raises(AgentDisposedError, match='agent "main" is disposed'):
            agent.send(text("y"))
        with pytest.raises(AgentDisposedError):
            agent.steer(text("y"))
        with pytest.raises(AgentDisposedError):
            agent.inject(text("y"))
        agent.cancel()  # no-op
        await asyncio.wait_for(agent.when_idle(), 1)
        # The id is free again.
        rig.ctx.agent_loop.create("main", model="scripted")
    finally:
        await rig.ctx.dispose()


async def test_disposing_from_inside_a_tool_does_not_deadlock() -> None:
    async def quit_tool(args: Any, call: Any) -> list[dict[str, Any]]:
        await call.agent.dispose()
        return text("bye")

    rig = await make_rig(Reply(tool_calls=[("c", "quit", {})]))
    try:
        rig.ctx.tools.register(define_tool(name="quit", description="q", execute=quit_tool))
        agent = rig.agent()
        agent.send(text("x"))
        await asyncio.wait_for(agent.when_idle(), 2)
        assert turn_ends(agent.session) == [{"kind": "disposed"}]
        assert agent.status == "disposed"
    finally:
        await rig.ctx.dispose()


async def test_context_disposal_disposes_running_agents() -> None:
    rig = await make_rig(SLOW)
    agent = rig.agent()
    session = agent.session
    agent.send(text("x"))
    await wait_until(lambda: _has_delta(session))
    await asyncio.wait_for(rig.ctx.dispose(), 2)
    assert turn_ends(session) == [{"kind": "disposed"}]
    assert agent.status == "disposed"


async def test_duplicate_agent_id_is_rejected_without_side_effects() -> None:
    rig = await make_rig()
    try:
        rig.agent("a")
        before = len(rig.ctx.sessions.list())
        with pytest.raises(ValueError, match='agent "a" is already registered'):
            rig.agent("a")
        assert len(rig.ctx.sessions.list()) == before
    finally:
        await rig.ctx.dispose()


# -- flush -----------------------------------------------------------------------------------------


async def test_every_turn_end_is_flushed_and_a_failing_flush_is_reported() -> None:
    rig = await make_rig("a", "b", "c")
    flushes: list[str] = []
    errors: list[Any] = []
    fail = [True]

    async def flush(session: Any) -> None:
        flushes.append(session.events[-1].type)
        if fail[0]:
            fail[0] = False
            raise OSError("disk full")

    rig.ctx.on("session/flush", flush)
    rig.ctx.on("agent/error", lambda *args: errors.append(args))
    try:
        agent = rig.agent()
        for prompt in ("x", "y", "z"):
            agent.send(text(prompt))
            await idle(agent)
        assert flushes == ["turn/end", "turn/end", "turn/end"]
        assert turn_ends(agent.session) == [{"kind": "completed"}] * 3
        assert len(errors) == 1 and errors[0][:2] == (agent, 1)
        assert isinstance(errors[0][3], OSError)
    finally:
        await rig.ctx.dispose()


async def test_flush_completes_before_the_agent_is_idle() -> None:
    rig = await make_rig("a")
    done: list[str] = []

    async def slow_flush(session: Any) -> None:
        await asyncio.sleep(0.05)  # a slow store (scripted): idle must wait for it
        done.append("flushed")

    rig.ctx.on("session/flush", slow_flush)
    try:
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        assert done == ["flushed"]
    finally:
        await rig.ctx.dispose()
