"""``dsh.Agent(subagents=[...])`` and ``agent.as_tool(...)`` against a loopback model: the child
runs with its own instructions and tools, and its session lands in the parent's store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dsh
from dsh.persistence.jsonl import JsonlStore
from tests.llm.sse_server import Reply
from tests.plugins.subagent.support import (
    RoutedServer,
    call_reply,
    system_of,
    text_reply,
    tool_messages,
)

RESEARCHER = "You are a researcher subagent. Use lookup."


@dsh.tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}: 42"


def _route(delegation: tuple[str, dict[str, Any]]) -> Any:
    def route(body: dict[str, Any]) -> Reply:
        done = tool_messages(body)
        if system_of(body) == RESEARCHER:
            if not done:
                return call_reply([("c-1", "lookup", {"topic": "answers"})])
            return text_reply(f"research says {done[-1]['content']}")
        if not done:
            return call_reply([("p-1", delegation[0], delegation[1])])
        return text_reply(f"parent relays: {done[-1]['content']}")

    return route


async def _check(tmp_path: Path, make_parent: Any, delegation: tuple[str, dict[str, Any]]) -> None:
    with RoutedServer(_route(delegation)) as server:
        researcher = dsh.Agent(
            model="m", base_url=server.base_url, instructions=RESEARCHER, tools=[lookup],
            name="researcher", description="Looks things up",
        )
        async with make_parent(server.base_url, researcher) as parent:
            result = await parent.run("find the answer")
        bodies = server.bodies()
    assert result.text == "parent relays: research says facts about answers: 42"
    child_body = next(b for b in bodies if system_of(b) == RESEARCHER)
    assert [t["function"]["name"] for t in child_body["tools"]] == ["lookup"]
    store = JsonlStore(tmp_path / "sessions")
    infos = await store.list()
    children = [i for i in infos if i.header.get("parentSession") == result.session_id]
    assert len(children) == 1
    child = await store.read(children[0].id)
    assert child.events[0].type == "subagent/link"
    assert child.events[0].data["parentCallId"] == "p-1"
    assert [e.data["name"] for e in child.events if e.type == "tool/call"] == ["lookup"]
    parent_result = next(e for e in result.events if e.type == "tool/result")
    assert parent_result.data["content"] == [{"type": "text", "text": "research says facts about answers: 42"}]
    assert parent_result.data["meta"]["childSessionId"] == children[0].id
    await store.close()


async def test_subagents_are_delegation_targets(tmp_path: Path) -> None:
    def make(base_url: str, researcher: dsh.Agent) -> dsh.Agent:
        return dsh.Agent(model="m", base_url=base_url, store=str(tmp_path / "sessions"), subagents=[researcher])

    args = {"description": "research", "prompt": "what is the answer?", "subagent_type": "researcher"}
    await _check(tmp_path, make, ("subagent", args))


async def test_as_tool_delegates_to_the_agent(tmp_path: Path) -> None:
    def make(base_url: str, researcher: dsh.Agent) -> dsh.Agent:
        tool = researcher.as_tool(name="research", description="Research a topic")
        return dsh.Agent(model="m", base_url=base_url, store=str(tmp_path / "sessions"), tools=[tool])

    await _check(tmp_path, make, ("research", {"description": "research", "prompt": "what is the answer?"}))


def test_subagent_listing_in_the_tool_description() -> None:
    researcher = dsh.Agent(name="researcher", description="Looks things up")
    tool = researcher.as_tool(name="research", description="Research a topic")
    assert tool.description == "Research a topic"
    assert json.dumps(tool.parameters["required"]) == '["description", "prompt"]'


async def test_resuming_a_parent_repairs_its_crash_cut_child(tmp_path: Path) -> None:
    from dsh.session import Session
    from dsh.session.vocab import step_boundary, turn_end, turn_start

    root = tmp_path / "sessions"
    store = JsonlStore(root)
    parent = Session("parent-1", header={"version": 0, "id": "parent-1", "createdAt": 1, "cwd": str(tmp_path)})
    child_header = {"version": 0, "id": "subagent-x", "createdAt": 2, "cwd": str(tmp_path),
                    "parentSession": "parent-1", "seedLength": 0}
    parent.append("turn/start", turn_start(1, "message", {"kind": "user"}))
    parent.append("user/message", {"content": [{"type": "text", "text": "go"}], "source": {"kind": "user"}}, surface_op="append")
    parent.append("turn/end", turn_end(1, {"kind": "completed"}))
    child = Session("subagent-x", header=child_header)
    child.append("subagent/link", {"parentSession": "parent-1", "parentCallId": "p-1", "delegationDepth": 1,
                                   "origin": "subagent", "agent": "general-purpose", "description": "d"})
    child.append("turn/start", turn_start(1, "message", {"kind": "user"}))
    child.append("user/message", {"content": [{"type": "text", "text": "work"}], "source": {"kind": "user"}}, surface_op="append")
    child.append("step/start", step_boundary(1, 1))
    for session in (parent, child):
        await store.create(dict(session.header))
        await store.append(session.id, list(session.events))
    await store.close()
    researcher = dsh.Agent(name="researcher")
    async with dsh.Agent(store=str(root), subagents=[researcher]) as agent:
        result = await agent.run("hello", session_id="parent-1")
    assert result.reason == {"kind": "completed"}
    store = JsonlStore(root)
    repaired = await store.read("subagent-x")
    assert [e.type for e in repaired.events][-2:] == ["step/end", "turn/end"]
    assert repaired.events[-1].data["reason"] == {"kind": "interrupted"}
    await store.close()
