"""Resume through a configured store: repair, turn numbering, ``request/header`` reasons."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from agent_support import MemoryStore, idle, of_type, outline, text, turn_ends
from tests.support.rig import MODEL, Rig, Rigs, make_rig

from dsh.persistence.base import SessionNotFound
from dsh.session import INTERRUPTED_TOOL_TEXT
from dsh.testing import Reply
from dsh.tools import define_tool


@pytest.fixture(params=["memory", "jsonl"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryStore | str:
    """A durable store: the in-test memory store, and the real JSONL store (a root folder)."""
    if request.param == "memory":
        return MemoryStore()
    return str(tmp_path / "sessions")


class Processes:
    """Fresh contexts ("processes") on the same durable store."""

    def __init__(self, rigs: Rigs, store: MemoryStore | str) -> None:
        self.rigs = rigs
        self.store = store

    async def spawn(self, *replies: Any) -> Rig:
        return await self.rigs.make(*replies, store=self.store)


@pytest.fixture
def processes(rigs: Rigs, store: MemoryStore | str) -> Processes:
    return Processes(rigs, store)


async def test_resume_continues_numbering_and_logs_a_resume_header(processes: Processes) -> None:
    first = await processes.spawn("one", "two")
    agent = first.agent()
    session_id = agent.session.id
    for prompt in ("a", "b"):
        agent.send(text(prompt))
        await idle(agent)
    history = agent.session.derive_messages().to_list()
    await agent.dispose()

    second = await processes.spawn("three")
    resumed = await second.ctx.agent_loop.resume("main", session_id)
    assert resumed.session.id == session_id
    assert resumed.options.model == MODEL  # taken from the latest logged header
    assert len(resumed.session.events) == 12 + 11  # turn 2 logs no header
    resumed.send(text("c"))
    await idle(resumed)
    events = resumed.session.events
    assert events[23].data == {"turn": 3, "trigger": {"kind": "message", "source": {"kind": "user"}}}
    headers = of_type(resumed.session, "request/header")
    assert [h.data["reason"] for h in headers] == ["initial", "resume"]
    assert headers[0].data["header"] == headers[1].data["header"]
    assert events[headers[1].seq - 1].data == {"turn": 3, "step": 1}
    assert second.model.requests[0].messages == [*history, {"role": "user", "content": text("c")}]
    await resumed.dispose()

    # Everything, including the resumed turn, reached the store.
    store = second.ctx.session_store
    stored = await store.read(session_id)
    assert len(stored.events) == 35
    assert [e.to_json() for e in stored.events] == [e.to_json() for e in events]


async def test_a_later_step_after_resume_logs_no_header(processes: Processes) -> None:
    first = await processes.spawn("one")
    agent = first.agent()
    agent.send(text("a"))
    await idle(agent)
    session_id = agent.session.id
    await agent.dispose()

    second = await processes.spawn(Reply(tool_calls=[("c", "t", {})]), "done", "again")
    second.ctx.tools.register(define_tool(name="t", description="t", execute=lambda a, c: text("r")))
    resumed = await second.ctx.agent_loop.resume("main", session_id)
    resumed.send(text("b"))
    await idle(resumed)
    resumed.send(text("c"))
    await idle(resumed)
    # Registering a tool changed the header: logged once as "resume" (first request), then kept.
    assert [h.data["reason"] for h in of_type(resumed.session, "request/header")] == ["initial", "resume"]


async def test_resume_repairs_a_crashed_turn_and_goes_on(processes: Processes) -> None:
    started = asyncio.Event()

    async def hang(args: Any, call: Any) -> list[dict[str, Any]]:
        started.set()
        await asyncio.sleep(30)  # a tool that hangs (scripted) until the "crash" cancels it
        return text("never")

    first = await processes.spawn(Reply(text="calling", tool_calls=[("call-1", "hang", {"x": 1})]))
    first.ctx.tools.register(define_tool(name="hang", description="h", execute=hang))
    agent = first.agent()
    session_id = agent.session.id
    agent.send(text("go"))
    await asyncio.wait_for(started.wait(), 2)
    # Simulate a crash mid-tool: the driver dies without closing the turn. Its final drain
    # still writes what was logged and releases the session, as a dying process's lock would go.
    crashed = len(agent.session.events)
    assert agent.driver is not None
    agent.driver.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await agent.driver
    assert agent.session.open_turn == 1

    second = await processes.spawn("recovered")
    resumed = await second.ctx.agent_loop.resume("main", session_id, model=MODEL)
    events = resumed.session.events
    assert [e.type for e in events[crashed:]] == ["tool/result", "step/end", "turn/end"]
    closer = events[crashed]
    assert closer.data["content"] == text(INTERRUPTED_TOOL_TEXT)
    assert closer.data["error"] == {"name": "InterruptedError", "code": "interrupted"}
    assert turn_ends(resumed.session) == [{"kind": "interrupted"}]
    resumed.send(text("again"))
    await idle(resumed)
    assert of_type(resumed.session, "turn/start")[-1].data["turn"] == 2
    assert turn_ends(resumed.session)[-1] == {"kind": "completed"}
    request = second.model.requests[0]
    assert request.messages[-2] == {
        "role": "user",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": "call-1",
                "content": text(INTERRUPTED_TOOL_TEXT),
                "isError": True,
            }
        ],
    }


async def test_resume_of_an_unknown_session_fails_and_registers_nothing(processes: Processes) -> None:
    rig = await processes.spawn()
    with pytest.raises(SessionNotFound):
        await rig.ctx.agent_loop.resume("main", "no-such-session")
    assert rig.ctx.agents.get("main") is None
    assert rig.ctx.sessions.list() == []


async def test_resume_without_a_store_is_an_error() -> None:
    rig = await make_rig()
    try:
        with pytest.raises(RuntimeError, match="no session store"):
            await rig.ctx.agent_loop.resume("main", "x")
    finally:
        await rig.ctx.dispose()


async def test_resumed_outline_matches_a_fresh_turn(processes: Processes) -> None:
    first = await processes.spawn("one")
    agent = first.agent()
    agent.send(text("a"))
    await idle(agent)
    session_id = agent.session.id
    await agent.dispose()
    second = await processes.spawn("two")
    resumed = await second.ctx.agent_loop.resume("main", session_id)
    resumed.send(text("b"))
    await idle(resumed)
    assert outline(resumed.session)[8:] == [
        "turn/start", "user/message", "step/start", "request/header", "chunk*5",
        "assistant/message", "step/end", "turn/end",
    ]


async def test_config_driven_agents_are_created_and_a_failed_resume_is_only_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agents = [{"id": "fresh", "model": MODEL, "cwd": "/srv"}, {"id": "ghost", "resumeSessionId": "missing"}]
    rig = await make_rig(store=MemoryStore(), loop_config={"agents": agents})
    try:
        fresh = rig.ctx.agents.get("fresh")
        assert fresh is not None and fresh.options.model == MODEL
        assert fresh.session.header["cwd"] == "/srv"
        assert fresh.session.id.startswith("fresh-session-")
        assert rig.ctx.agents.get("ghost") is None
        assert 'cannot resume session "missing"' in caplog.text
    finally:
        await rig.dispose()
