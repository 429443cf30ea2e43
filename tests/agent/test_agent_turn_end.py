"""Every ``turn/end`` reason the loop writes, and the failure paths that lead to them."""

from __future__ import annotations

from typing import Any

from agent_support import idle, of_type, outline, text, turn_ends
from tests.support.rig import MODEL, make_rig
from tests.support.wait import wait_until

from dsh.llm.types import LlmError
from dsh.testing import Reply
from dsh.tools import define_tool

TOOL_CALL_CHUNKS = [
    {"type": "block-start", "index": 0, "blockType": "text"},
    {"type": "text-delta", "index": 0, "text": "cut"},
    {"type": "block-start", "index": 1, "blockType": "tool-call"},
    {"type": "tool-call-delta", "index": 1, "id": "c1", "name": "t", "argumentsDelta": "{}"},
    {"type": "usage", "usage": {"inputTokens": 5, "outputTokens": 9}},
    {"type": "finish", "reason": {"kind": "max-tokens"}},
]


async def test_completed() -> None:
    rig = await make_rig("fine")
    try:
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        assert turn_ends(agent.session) == [{"kind": "completed"}]
    finally:
        await rig.ctx.dispose()


async def test_adapter_failure_ends_the_turn_with_error_and_code() -> None:
    rig = await make_rig(Reply(error=LlmError("rate limited", code="RATE_LIMIT")), "later")
    errors: list[Any] = []
    rig.ctx.on("agent/error", lambda *args: errors.append(args))
    try:
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        assert outline(agent.session) == [
            "turn/start", "user/message", "step/start", "request/header", "step/end", "turn/end",
        ]
        assert turn_ends(agent.session) == [
            {"kind": "error", "step": 1, "message": "rate limited", "code": "RATE_LIMIT"}
        ]
        assert len(errors) == 1 and errors[0][:3] == (agent, 1, 1)
        assert isinstance(errors[0][3], LlmError)
        # The agent keeps working.
        agent.send(text("again"))
        await idle(agent)
        assert turn_ends(agent.session)[1] == {"kind": "completed"}
    finally:
        await rig.ctx.dispose()


async def test_error_thrown_mid_stream_keeps_the_chunks_and_has_no_code() -> None:
    rig = await make_rig(
        Reply(chunks=[{"type": "block-start", "index": 0, "blockType": "text"}, ValueError("torn")])
    )
    try:
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        assert outline(agent.session)[3:] == ["request/header", "chunk*1", "step/end", "turn/end"]
        assert turn_ends(agent.session) == [{"kind": "error", "step": 1, "message": "torn"}]
    finally:
        await rig.ctx.dispose()


async def test_finish_error_and_finish_aborted() -> None:
    rig = await make_rig(
        Reply(finish={"kind": "error", "message": "model stopped: content_filter", "code": "CONTENT_FILTER"}),
        Reply(finish={"kind": "error", "message": "no code"}),
        Reply(finish={"kind": "aborted"}),
    )
    try:
        agent = rig.agent()
        for prompt in ("a", "b", "c"):
            agent.send(text(prompt))
            await idle(agent)
        assert turn_ends(agent.session) == [
            {"kind": "error", "step": 1, "message": "model stopped: content_filter", "code": "CONTENT_FILTER"},
            {"kind": "error", "step": 1, "message": "no code"},
            {"kind": "error", "step": 1, "message": "model stream aborted", "code": "ABORTED"},
        ]
        # No assistant/message for a failed step; every step is closed.
        assert of_type(agent.session, "assistant/message") == []
        assert len(of_type(agent.session, "step/end")) == 3
    finally:
        await rig.ctx.dispose()


async def test_stream_without_finish_counts_as_stop() -> None:
    rig = await make_rig(
        Reply(
            chunks=[
                {"type": "block-start", "index": 0, "blockType": "text"},
                {"type": "text-delta", "index": 0, "text": "partial"},
            ]
        )
    )
    try:
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        assert turn_ends(agent.session) == [{"kind": "completed"}]
        assert of_type(agent.session, "assistant/message")[0].data == {
            "turn": 1, "step": 1, "content": text("partial"),
        }
    finally:
        await rig.ctx.dispose()


async def test_no_model() -> None:
    rig = await make_rig()
    try:
        agent = rig.agent("nomodel", model=None)
        agent.send(text("x"))
        await idle(agent)
        assert outline(agent.session) == ["turn/start", "user/message", "step/start", "step/end", "turn/end"]
        assert turn_ends(agent.session) == [
            {
                "kind": "error",
                "step": 1,
                "message": 'agent "nomodel" has no model: set AgentOptions.model or supply one via the agent/request waterfall',
            }
        ]
    finally:
        await rig.ctx.dispose()


async def test_max_tokens_strips_tool_calls_and_runs_no_tools() -> None:
    ran: list[Any] = []
    rig = await make_rig(Reply(chunks=TOOL_CALL_CHUNKS))
    try:
        rig.ctx.tools.register(define_tool(name="t", description="t", execute=lambda a, c: ran.append(a)))
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        assert ran == []
        assert outline(agent.session)[3:] == [
            "request/header", "chunk*6", "assistant/message", "step/end", "turn/end",
        ]
        message = of_type(agent.session, "assistant/message")[0]
        assert message.data == {
            "turn": 1, "step": 1, "content": text("cut"),
            "usage": {"inputTokens": 5, "outputTokens": 9},
        }
        assert turn_ends(agent.session) == [{"kind": "max-tokens"}]
    finally:
        await rig.ctx.dispose()


async def test_max_tokens_is_kept_when_steering_continues_the_turn() -> None:
    rig = await make_rig(Reply(text="long", delay=0.05, chunks=TOOL_CALL_CHUNKS), "then")
    try:
        agent = rig.agent()
        agent.send(text("x"))
        await wait_until(lambda: bool(of_type(agent.session, "assistant/chunk")))  # mid-stream
        agent.steer(text("shorter please"))
        await idle(agent)
        assert outline(agent.session)[-7:] == [
            "steering/message", "step/end", "step/start", "chunk*5", "assistant/message", "step/end", "turn/end",
        ]
        assert turn_ends(agent.session) == [{"kind": "max-tokens"}]
    finally:
        await rig.ctx.dispose()


async def test_rejected_when_every_prompt_is_blocked() -> None:
    rig = await make_rig("allowed reply")

    def gate(agent: Any, content: Any, source: Any, next_: Any) -> Any:
        if content[0]["text"].startswith("bad"):
            return {"kind": "block", "reason": f"blocked {content[0]['text']}"}
        return next_()

    try:
        rig.ctx.on("agent/prompt-submit", gate)
        agent = rig.agent()
        agent.send(text("bad 1"))
        agent.send(text("bad 2"))
        await idle(agent)
        assert outline(agent.session) == ["turn/start", "prompt/blocked", "prompt/blocked", "turn/end"]
        assert of_type(agent.session, "prompt/blocked")[0].data == {
            "content": text("bad 1"), "source": {"kind": "user"}, "reason": "blocked bad 1",
        }
        assert turn_ends(agent.session) == [{"kind": "rejected", "reason": "blocked bad 2"}]
        assert rig.model.requests == []
        # One allowed prompt in a batch is enough to run the turn.
        agent.send(text("bad 3"))
        agent.send(text("good"))
        await idle(agent)
        assert outline(agent.session)[4:7] == ["turn/start", "prompt/blocked", "user/message"]
        assert turn_ends(agent.session)[1] == {"kind": "completed"}
    finally:
        await rig.ctx.dispose()


async def test_prompt_submit_can_rewrite_and_add_context() -> None:
    rig = await make_rig("ok")

    def rewrite(agent: Any, content: Any, source: Any, next_: Any) -> Any:
        return {
            "kind": "allow",
            "content": text("rewritten"),
            "additionalContexts": [{"content": text("extra"), "envelope": "raw", "meta": {"m": 1}}],
        }

    try:
        rig.ctx.on("agent/prompt-submit", rewrite)
        agent = rig.agent()
        agent.send(text("orig"))
        await idle(agent)
        assert outline(agent.session)[:4] == ["turn/start", "user/message", "context/message", "step/start"]
        assert of_type(agent.session, "user/message")[0].data["content"] == text("rewritten")
        assert of_type(agent.session, "context/message")[0].data == {
            "content": text("extra"), "source": {"kind": "user"}, "envelope": "raw", "meta": {"m": 1},
        }
        assert rig.model.requests[0].messages == [
            {"role": "user", "content": text("rewritten")},
            {"role": "user", "content": text("extra")},
        ]
    finally:
        await rig.ctx.dispose()


async def test_throwing_prompt_submit_is_an_error_at_step_zero() -> None:
    rig = await make_rig()

    def fail(*args: Any) -> Any:
        raise RuntimeError("submit broke")

    try:
        rig.ctx.on("agent/prompt-submit", fail)
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        assert outline(agent.session) == ["turn/start", "turn/end"]
        assert turn_ends(agent.session) == [{"kind": "error", "step": 0, "message": "submit broke"}]
    finally:
        await rig.ctx.dispose()


async def test_throwing_pre_step_ends_with_error_and_no_step_start() -> None:
    rig = await make_rig("never")
    errors: list[Any] = []
    rig.ctx.on("agent/error", lambda *args: errors.append(args))

    def reading(agent: Any, turn: int, step: int, *rest: Any) -> None:
        agent.inject(text("the time"), source={"kind": "plugin", "plugin": "time-context"})

    class Coded(Exception):
        code = "PRE_STEP"

    def fail(*args: Any) -> None:
        raise Coded("pre-step broke")

    try:
        rig.ctx.on("agent/pre-step", reading)
        rig.ctx.on("agent/pre-step", fail)
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        assert outline(agent.session) == ["turn/start", "user/message", "context/message", "turn/end"]
        assert turn_ends(agent.session) == [
            {"kind": "error", "step": 1, "message": "pre-step broke", "code": "PRE_STEP"}
        ]
        assert rig.model.requests == []
        assert errors[0][:3] == (agent, 1, 1)
    finally:
        await rig.ctx.dispose()


async def test_cancelling_pre_step_ends_aborted_and_later_listeners_see_the_signal() -> None:
    rig = await make_rig("never", "after")
    seen: list[Any] = []

    def cancel(agent: Any, turn: int, step: int, system: str, prefix: Any, signal: Any) -> None:
        if turn == 1:
            agent.cancel("user pressed esc")

    def later(agent: Any, turn: int, step: int, system: str, prefix: Any, signal: Any) -> None:
        seen.append((turn, signal.aborted, signal.reason))

    try:
        rig.ctx.on("agent/pre-step", cancel)
        rig.ctx.on("agent/pre-step", later)
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        assert outline(agent.session) == ["turn/start", "user/message", "turn/end"]
        assert turn_ends(agent.session) == [{"kind": "aborted", "reason": "user pressed esc"}]
        assert seen == [(1, True, "user pressed esc")]
        # The cancel marker does not leak into the next turn.
        agent.send(text("y"))
        await idle(agent)
        assert turn_ends(agent.session)[1] == {"kind": "completed"}
        assert seen[1] == (2, False, None)
    finally:
        await rig.ctx.dispose()


async def test_cancel_from_a_session_event_listener_after_step_start_closes_the_step() -> None:
    rig = await make_rig("never")
    try:
        agent = rig.agent()

        def on_event(session: Any, event: Any) -> None:
            if event.type == "step/start":
                agent.cancel("watchdog")

        rig.ctx.on("session/event", on_event)
        agent.send(text("x"))
        await idle(agent)
        assert outline(agent.session) == ["turn/start", "user/message", "step/start", "step/end", "turn/end"]
        assert turn_ends(agent.session) == [{"kind": "aborted", "reason": "watchdog"}]
        assert rig.model.requests == []
    finally:
        await rig.ctx.dispose()


async def test_step_cap_ends_with_max_steps() -> None:
    rig = await make_rig(
        loop_config={"maxStepsPerTurn": 3}, default=Reply(tool_calls=[("c", "t", {})])
    )
    errors: list[Any] = []
    rig.ctx.on("agent/error", lambda *args: errors.append(args))
    try:
        rig.ctx.tools.register(define_tool(name="t", description="t", execute=lambda a, c: text("again")))
        agent = rig.agent()
        agent.send(text("loop forever"))
        await idle(agent)
        assert len(of_type(agent.session, "step/start")) == 3
        assert turn_ends(agent.session) == [
            {"kind": "error", "step": 3, "message": "turn 1 exceeded 3 steps", "code": "MAX_STEPS"}
        ]
        assert outline(agent.session)[-2:] == ["step/end", "turn/end"]
        assert errors[0][:3] == (agent, 1, 3)
    finally:
        await rig.ctx.dispose()


async def test_default_step_cap_is_64() -> None:
    rig = await make_rig()
    try:
        assert rig.ctx.agent_loop.max_steps == 64
    finally:
        await rig.ctx.dispose()


async def test_turn_stop_bail_is_terminal_and_continuation_can_stop() -> None:
    rig = await make_rig(Reply(tool_calls=[("c", "t", {})]), Reply(tool_calls=[("d", "t", {})]))

    def stopper(agent: Any, turn: int) -> Any:
        return {"action": "stop"}

    try:
        rig.ctx.tools.register(define_tool(name="t", description="t", execute=lambda a, c: text("r")))
        rig.ctx.on("agent/turn-stop", stopper)
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        assert len(of_type(agent.session, "step/start")) == 1
        assert turn_ends(agent.session) == [{"kind": "completed"}]
    finally:
        await rig.ctx.dispose()


async def test_turn_continuation_reason_is_queued_as_steering() -> None:
    rig = await make_rig("first", "second")

    async def continuation(agent: Any, turn: int, default: Any, next_: Any) -> Any:
        if len(agent.session.events) < 15:
            return {"action": "continue", "reason": "keep going"}
        return await next_()

    try:
        rig.ctx.on("agent/turn-continuation", continuation)
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        steering = of_type(agent.session, "steering/message")
        assert [s.data for s in steering] == [
            {"turn": 1, "content": text("keep going"), "source": {"kind": "user"}}
        ]
        assert len(of_type(agent.session, "step/start")) == 2
        assert turn_ends(agent.session) == [{"kind": "completed"}]
    finally:
        await rig.ctx.dispose()


async def test_llm_model_seen_by_adapter() -> None:
    rig = await make_rig("x")
    try:
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        assert rig.model.requests[0].model == MODEL
    finally:
        await rig.ctx.dispose()
