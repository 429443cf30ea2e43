"""The agent loop's turn and step order (docs/agent-loop.md) with real components."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from agent_support import IDENTITY, chunk_types, idle, of_type, outline, text, turn_ends
from tests.fixtures import FIXTURES
from tests.support.rig import MODEL, make_rig

from dsh.agent import loop as loop_module
from dsh.llm import echo
from dsh.testing import Reply
from dsh.tools import ToolError, ToolResult, define_tool
from dsh.tools import echo as echo_tool_plugin

SIMPLE_TURN = [
    "turn/start",
    "user/message",
    "step/start",
    "request/header",
    "chunk*5",
    "assistant/message",
    "step/end",
    "turn/end",
]


def test_dev_checks_are_on_in_the_suite() -> None:
    assert os.environ.get("DSH_DEV_CHECKS") == "1"


# -- the mock-echo transcript against the reference log --------------------------------------


def _comparable(event: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in event.items() if k != "time"}
    if out["type"] == "request/header":
        # The composition differs (the reference app loaded bash, ask-user, a persona).
        out["data"] = {
            "header": {"config": out["data"]["header"]["config"]},
            "reason": out["data"]["reason"],
        }
    return out


async def test_mock_echo_tool_call_matches_the_reference_log() -> None:
    lines = (FIXTURES / "stdio-tool-call.jsonl").read_text().splitlines()
    header, expected = json.loads(lines[0]), [json.loads(line) for line in lines[1:]]
    rig = await make_rig(models=(), plugins=[(echo, {"delayMs": 0}), echo_tool_plugin])
    try:
        agent = rig.agent(model="mock-echo", cwd=header["cwd"])
        assert agent.session.id.startswith("main-session-")
        agent.send(text("echo hello world"))
        await idle(agent)
        agent.send(text("thanks"))
        await idle(agent)
        got = [e.to_json() for e in agent.session.events]
        assert len(got) == len(expected) == 145
        for index, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
            assert _comparable(mine) == _comparable(theirs), f"event {index}"
            assert list(mine) == list(theirs), f"key order of event {index}"
        derived = json.loads((FIXTURES / "stdio-tool-call.derived.json").read_text())
        assert agent.session.derive_messages() == derived
        # The request/header carries the real system prompt and the echo tool.
        logged = of_type(agent.session, "request/header")
        assert len(logged) == 1
        assert logged[0].data["header"]["system"] == IDENTITY
        assert [t["name"] for t in logged[0].data["header"]["tools"]] == ["echo"]
    finally:
        await rig.dispose()


# -- one plain turn, exactly -------------------------------------------------------------------


async def test_plain_turn_exact_events_and_request() -> None:
    rig = await make_rig(Reply(text="Hello!", usage={"inputTokens": 3, "outputTokens": 2}))
    rig.record("agent/status", "agent/queued", "agent/created", "agent/session-start")
    try:
        agent = rig.agent()
        assert rig.bus == [("agent/created", agent), ("agent/session-start", agent, "startup")]
        rig.bus.clear()
        agent.send(text("hi"))
        assert agent.status == "idle"  # not running synchronously
        await idle(agent)
        session = agent.session
        assert outline(session) == SIMPLE_TURN
        data = [e.data for e in session.events]
        assert data[0] == {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}}
        assert data[1] == {"content": text("hi"), "source": {"kind": "user"}}
        assert session.events[1].surface_op == "append"
        assert data[2] == {"turn": 1, "step": 1}
        assert data[3] == {
            "header": {"config": {"model": MODEL}, "system": IDENTITY},
            "reason": "initial",
        }
        assert chunk_types(session) == ["block-start", "text-delta", "block-end", "usage", "finish"]
        assert all(e.data["turn"] == 1 and e.data["step"] == 1 for e in of_type(session, "assistant/chunk"))
        message = session.events[9]
        assert message.data == {
            "turn": 1,
            "step": 1,
            "content": text("Hello!"),
            "usage": {"inputTokens": 3, "outputTokens": 2},
        }
        assert list(message.source_event_seqs or ()) == [4, 5, 6, 7, 8]
        assert data[10] == {"turn": 1, "step": 1}
        assert data[11] == {"turn": 1, "reason": {"kind": "completed"}}
        request = rig.model.requests[0]
        assert request.model == MODEL
        assert request.messages == [{"role": "user", "content": text("hi")}]
        assert request.system == IDENTITY
        assert list(request.tools) == []
        assert request.session_id == session.id
        assert request.signal is not None and not request.signal.aborted
        assert rig.bus == [
            ("agent/queued", agent, text("hi"), {"source": {"kind": "user"}, "steering": False}),
            ("agent/status", agent, "running"),
            ("agent/status", agent, "idle"),
        ]
    finally:
        await rig.ctx.dispose()


async def test_turns_number_from_the_log_and_history_accumulates() -> None:
    rig = await make_rig("one", "two")
    try:
        agent = rig.agent()
        agent.send(text("a"))
        await idle(agent)
        agent.send(text("b"), source={"kind": "plugin", "plugin": "cron"})
        await idle(agent)
        starts = [e.data for e in of_type(agent.session, "turn/start")]
        assert starts == [
            {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}},
            {"turn": 2, "trigger": {"kind": "message", "source": {"kind": "plugin", "plugin": "cron"}}},
        ]
        assert rig.model.requests[1].messages == [
            {"role": "user", "content": text("a")},
            {"role": "assistant", "content": text("one")},
            {"role": "user", "content": text("b")},
        ]
        # Unchanged header: logged once.
        assert len(of_type(agent.session, "request/header")) == 1
    finally:
        await rig.ctx.dispose()


async def test_messages_queued_together_run_as_one_turn() -> None:
    rig = await make_rig("both")
    try:
        agent = rig.agent()
        agent.send(text("a"))
        agent.send(text("b"))
        await idle(agent)
        assert outline(agent.session)[:3] == ["turn/start", "user/message", "user/message"]
        assert len(of_type(agent.session, "turn/start")) == 1
        assert rig.model.requests[0].messages == [
            {"role": "user", "content": text("a")},
            {"role": "user", "content": text("b")},
        ]
    finally:
        await rig.ctx.dispose()


async def test_send_snapshots_content_and_rejects_non_json() -> None:
    rig = await make_rig("ok")
    try:
        agent = rig.agent()
        content = text("x")
        agent.send(content)
        content[0]["text"] = "mutated"
        with pytest.raises(TypeError, match="losslessly JSON-serializable"):
            agent.send([{"type": "text", "text": float("nan")}])
        with pytest.raises(TypeError, match="losslessly JSON-serializable"):
            agent.send(text("y"), source={"kind": object()})
        await idle(agent)
        assert of_type(agent.session, "user/message")[0].data["content"] == text("x")
    finally:
        await rig.ctx.dispose()


# -- tools -------------------------------------------------------------------------------------


async def test_tool_calls_run_sequentially_and_the_turn_continues() -> None:
    trace: list[str] = []

    async def slow(args: Any, call: Any) -> list[dict[str, Any]]:
        trace.append(f"start {call.call_id}")
        await asyncio.sleep(0.01)  # a tool that takes its time (scripted): c2 must wait for it
        trace.append(f"end {call.call_id}")
        return text(f"slow:{args['n']}")

    def fast(args: Any, call: Any) -> list[dict[str, Any]]:
        trace.append(f"run {call.call_id}")
        assert call.agent is not None and call.name == "fast"
        return text("fast")

    rig = await make_rig(
        Reply(text="working", tool_calls=[("c1", "slow", {"n": 1}), ("c2", "fast", "")]),
        Reply(text="done"),
    )
    try:
        rig.ctx.tools.register(define_tool(name="slow", description="Slow.", parameters=None, execute=slow))
        rig.ctx.tools.register(define_tool(name="fast", description="Fast.", execute=fast))
        agent = rig.agent()
        agent.send(text("go"))
        await idle(agent)
        session = agent.session
        assert trace == ["start c1", "end c1", "run c2"]
        assert outline(session) == [
            "turn/start",
            "user/message",
            "step/start",
            "request/header",
            "chunk*11",
            "assistant/message",
            "tool/call",
            "tool/result",
            "tool/call",
            "tool/result",
            "step/end",
            "step/start",
            "chunk*5",
            "assistant/message",
            "step/end",
            "turn/end",
        ]
        calls = of_type(session, "tool/call")
        results = of_type(session, "tool/result")
        assert calls[0].data == {"turn": 1, "step": 1, "callId": "c1", "name": "slow", "arguments": '{"n":1}'}
        assert calls[1].data == {"turn": 1, "step": 1, "callId": "c2", "name": "fast", "arguments": ""}
        assert results[0].data == {
            "turn": 1, "step": 1, "callId": "c1", "content": text("slow:1"), "isError": False,
        }
        assert list(results[0].source_event_seqs or ()) == [calls[0].seq]
        assert list(results[1].source_event_seqs or ()) == [calls[1].seq]
        header = of_type(session, "request/header")[0].data["header"]
        assert [t["name"] for t in header["tools"]] == ["fast", "slow"]
        assert header["tools"][0]["parameters"] == {"type": "object", "properties": {}}
        second = rig.model.requests[1]
        assert second.messages[-2:] == [
            {"role": "user", "content": [{"type": "tool-result", "toolCallId": "c1", "content": text("slow:1"), "isError": False}]},
            {"role": "user", "content": [{"type": "tool-result", "toolCallId": "c2", "content": text("fast"), "isError": False}]},
        ]
        assert [t["name"] for t in second.tools] == ["fast", "slow"]
        assert turn_ends(session) == [{"kind": "completed"}]
    finally:
        await rig.ctx.dispose()


async def test_tool_errors_become_error_results() -> None:
    seen: list[Any] = []

    def boom(args: Any, call: Any) -> list[dict[str, Any]]:
        raise RuntimeError("boom")

    def coded(args: Any, call: Any) -> list[dict[str, Any]]:
        raise ToolError("no such file", code="ENOENT")

    def raw(args: Any, call: Any) -> list[dict[str, Any]]:
        seen.append(args)
        return text("raw ok")

    rig = await make_rig(
        Reply(
            tool_calls=[
                ("a", "missing", {}),
                ("b", "boom", {}),
                ("c", "coded", {}),
                ("d", "raw", "{not json"),
            ]
        ),
        Reply(text="recovered"),
    )
    try:
        for name, fn in (("boom", boom), ("coded", coded), ("raw", raw)):
            rig.ctx.tools.register(define_tool(name=name, description=name, execute=fn))
        agent = rig.agent()
        agent.send(text("go"))
        await idle(agent)
        results = [e.data for e in of_type(agent.session, "tool/result")]
        assert results[0] == {
            "turn": 1, "step": 1, "callId": "a",
            "content": text('Error: unknown tool "missing"'), "isError": True,
            "error": {"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"},
        }
        assert results[1] == {
            "turn": 1, "step": 1, "callId": "b", "content": text("Error: boom"), "isError": True,
        }
        assert results[2] == {
            "turn": 1, "step": 1, "callId": "c", "content": text("Error: no such file"),
            "isError": True, "error": {"name": "ToolError", "code": "ENOENT"},
        }
        # Arguments that are not JSON never reach the tool (the registry's schema check).
        assert results[3] == {
            "turn": 1, "step": 1, "callId": "d", "isError": True,
            "content": text(
                'Error: invalid arguments for tool "raw": not valid JSON (Expecting property name '
                "enclosed in double quotes: line 1 column 2 (char 1))"
            ),
            "error": {"name": "InvalidToolArguments", "code": "INVALID_ARGUMENTS"},
        }
        assert seen == []
        # The tool errors do not end the turn: the model sees them and answers.
        assert turn_ends(agent.session) == [{"kind": "completed"}]
        last = rig.model.requests[1].messages[-4]
        assert last["content"][0]["isError"] is True
    finally:
        await rig.ctx.dispose()


async def test_tool_meta_and_additional_contexts() -> None:
    def tool(args: Any, call: Any) -> ToolResult:
        return ToolResult(
            content=text("r"),
            meta={"k": 1},
            additional_contexts=[{"content": text("ctx"), "source": {"kind": "plugin", "plugin": "t"}}],
        )

    rig = await make_rig(Reply(tool_calls=[("a", "t", {})]), "done")
    try:
        rig.ctx.tools.register(define_tool(name="t", description="t", execute=tool))
        agent = rig.agent()
        agent.send(text("go"))
        await idle(agent)
        assert outline(agent.session)[6:10] == ["tool/call", "tool/result", "context/message", "step/end"]
        assert of_type(agent.session, "tool/result")[0].data["meta"] == {"k": 1}
        assert of_type(agent.session, "context/message")[0].data == {
            "content": text("ctx"), "source": {"kind": "plugin", "plugin": "t"},
        }
        assert rig.model.requests[1].messages[-1] == {
            "role": "user",
            "content": [
                {"type": "text", "text": '<context source="plugin">'},
                *text("ctx"),
                {"type": "text", "text": "</context>"},
            ],
        }
    finally:
        await rig.ctx.dispose()


# -- request headers and the prefix ------------------------------------------------------------


async def test_header_change_is_logged_only_when_it_differs() -> None:
    rig = await make_rig(
        Reply(tool_calls=[("a", "t", {})]),
        Reply(tool_calls=[("b", "t", {})]),
        "done",
        "again",
    )
    calls = 0

    def tool(args: Any, call: Any) -> list[dict[str, Any]]:
        nonlocal calls
        calls += 1
        if calls == 1:
            rig.ctx.tools.register(define_tool(name="u", description="new", execute=tool))
        return text("ok")

    try:
        rig.ctx.tools.register(define_tool(name="t", description="t", execute=tool))
        agent = rig.agent()
        agent.send(text("go"))
        await idle(agent)
        agent.send(text("more"))
        await idle(agent)
        headers = of_type(agent.session, "request/header")
        assert [h.data["reason"] for h in headers] == ["initial", "change"]
        assert [t["name"] for t in headers[1].data["header"]["tools"]] == ["t", "u"]
        # The change is logged right after the second step's step/start.
        assert agent.session.events[headers[1].seq - 1].data == {"turn": 1, "step": 2}
    finally:
        await rig.ctx.dispose()


async def test_request_waterfall_changes_config_and_header() -> None:
    rig = await make_rig("a", "b")
    try:
        async def request(agent: Any, turn: int, step: int, config: dict[str, Any], next_: Any) -> Any:
            config = await next_()
            if turn == 2:
                return {**config, "temperature": 0.5, "maxTokens": 100}
            return config

        rig.ctx.on("agent/request", request)
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        agent.send(text("y"))
        await idle(agent)
        headers = of_type(agent.session, "request/header")
        assert [h.data for h in headers] == [
            {"header": {"config": {"model": MODEL}, "system": IDENTITY}, "reason": "initial"},
            {
                "header": {"config": {"model": MODEL, "temperature": 0.5, "maxTokens": 100}, "system": IDENTITY},
                "reason": "change",
            },
        ]
        assert rig.model.requests[1].temperature == 0.5
        assert rig.model.requests[1].max_tokens == 100
    finally:
        await rig.ctx.dispose()


async def test_session_prefix_is_composed_once_and_sent_first() -> None:
    rig = await make_rig("a", "b")
    composed = 0
    prefix = [{"role": "user", "content": text("PREFIX")}]

    def session_prefix(agent: Any, seed: list[Any], signal: Any, next_: Any) -> Any:
        nonlocal composed
        composed += 1
        return prefix

    try:
        rig.ctx.on("agent/session-prefix", session_prefix)
        agent = rig.agent()
        agent.send(text("x"))
        await idle(agent)
        agent.send(text("y"))
        await idle(agent)
        assert composed == 1
        header = of_type(agent.session, "request/header")[0].data["header"]
        assert header["messagePrefix"] == prefix
        assert rig.model.requests[1].messages[0] == prefix[0]
        # The prefix is never part of the log-derived history.
        assert agent.session.derive_messages()[0] == {"role": "user", "content": text("x")}
    finally:
        await rig.ctx.dispose()


# -- pre-step and the request/derive invariant -------------------------------------------------


async def test_pre_step_runs_serially_with_a_per_step_signal_before_step_start() -> None:
    rig = await make_rig(Reply(tool_calls=[("a", "t", {})]), "done")
    seen: list[Any] = []

    async def first(agent: Any, turn: int, step: int, system: str, prefix: Any, signal: Any) -> None:
        seen.append(("first", turn, step, system, list(prefix), signal.aborted, agent.session.events[-1].type))
        agent.inject(text(f"reading {step}"), source={"kind": "plugin", "plugin": "clock"})
        await asyncio.sleep(0)

    def second(agent: Any, turn: int, step: int, system: str, prefix: Any, signal: Any) -> None:
        seen.append(("second", step, signal))

    try:
        rig.ctx.tools.register(define_tool(name="t", description="t", execute=lambda a, c: text("ok")))
        rig.ctx.on("agent/pre-step", second)
        rig.ctx.on("agent/pre-step", first, prepend=True)
        agent = rig.agent()
        agent.send(text("go"))
        await idle(agent)
        assert seen[0] == ("first", 1, 1, IDENTITY, [], False, "user/message")
        assert seen[1][:2] == ("second", 1)
        assert seen[2][:3] == ("first", 1, 2)
        assert seen[2][-1] == "step/end"
        assert seen[1][2] is not seen[3][2]  # a fresh signal per step
        types = outline(agent.session)
        assert types[:4] == ["turn/start", "user/message", "context/message", "step/start"]
        second_start = [i for i, t in enumerate(types) if t == "step/start"][1]
        assert types[second_start - 1] == "context/message"
        # The reading is in the request of its own step (snapshot taken before step/start).
        assert rig.model.requests[0].messages[-1]["content"][1] == text("reading 1")[0]
        assert rig.model.requests[1].messages[-1]["content"][1] == text("reading 2")[0]
    finally:
        await rig.ctx.dispose()


async def test_invariant_check_catches_a_request_that_differs_from_the_log() -> None:
    rig = await make_rig("one", "two")
    errors: list[Any] = []
    rig.ctx.on("agent/error", lambda *args: errors.append(args))
    try:
        assert rig.ctx.agent_loop.dev_checks is True
        agent = rig.agent()
        agent.send(text("a"))
        await idle(agent)
        # Corrupt the incremental derivation: the request no longer matches the raw log.
        agent.session.derive_messages = lambda: []  # type: ignore[method-assign]
        agent.send(text("b"))
        await idle(agent)
        reason = turn_ends(agent.session)[1]
        assert reason["kind"] == "error" and reason["step"] == 1 and reason["code"] == "INVARIANT"
        assert "differs from the log-derived history" in reason["message"]
        assert len(rig.model.requests) == 1
        assert isinstance(errors[0][3], loop_module.InvariantError)
    finally:
        await rig.ctx.dispose()


async def test_invariant_holds_across_replace_and_injections() -> None:
    """A compaction-like replace between steps keeps request == prefix + derived log."""
    rig = await make_rig(Reply(tool_calls=[("a", "t", {})]), "two", "three", "four")

    def compact(agent: Any, turn: int, step: int, system: str, prefix: Any, signal: Any) -> None:
        session = agent.session
        if turn == 2 and step == 1:
            surface = session.surface
            shadowed = list(surface[:-1])
            session.append(
                "user/message",
                {"content": text("summary"), "source": {"kind": "plugin", "plugin": "compact"}},
                surface_op={"op": "replace", "start": surface[0], "end": surface[-2]},
                source_event_seqs=shadowed,
            )

    try:
        rig.ctx.tools.register(define_tool(name="t", description="t", execute=lambda a, c: text("ok")))
        rig.ctx.on("agent/pre-step", compact)
        agent = rig.agent()
        agent.send(text("a"))
        await idle(agent)
        agent.send(text("b"))
        await idle(agent)
        agent.send(text("c"))
        await idle(agent)
        assert turn_ends(agent.session) == [{"kind": "completed"}] * 3
        assert rig.model.requests[2].messages == [
            {"role": "user", "content": text("summary")},
            {"role": "user", "content": text("b")},
        ]
        assert rig.model.requests[3].messages[:2] == rig.model.requests[2].messages
    finally:
        await rig.ctx.dispose()


async def test_no_per_step_backward_scan_of_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    original = loop_module._latest_header

    def counting(session: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(session)

    monkeypatch.setattr(loop_module, "_latest_header", counting)
    rig = await make_rig(default=Reply(text="ok"), loop_config={"devChecks": False})
    try:
        agent = rig.agent()
        for i in range(5):
            agent.send(text(f"m{i}"))
            await idle(agent)
        assert calls == 0
        assert len(of_type(agent.session, "request/header")) == 1
    finally:
        await rig.dispose()
