"""Approvals: policy, fail-closed, audit events, session rules folded back on resume, the
registry gate for any tool with ``needs_approval``, and the one-time policy notice."""

from __future__ import annotations

from typing import Any

from ws_support import Workspace, make_agent

import dsh.tools.registry as tools_plugin
from dsh.runtime import Context
from dsh.tools import define_tool
from dsh.tools.workspace.approval import ASK_SENTENCE, NEVER_SENTENCE, ApprovalRequest

ran: list[str] = []

risky = define_tool(
    name="risky",
    description="A tool an untrusted server offers.",
    parameters={"type": "object", "properties": {"x": {"type": "string"}}},
    execute=lambda args, call: ran.append("risky") or "did it",
    needs_approval=True,
)


def _audit(ws: Workspace) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, dict(e.data)) for e in ws.agent.session.events if e.type.startswith("approval/")]


async def test_needs_approval_without_any_gate_fails_closed() -> None:
    ctx = Context()
    await ctx.plugin(tools_plugin)
    ctx.tools.register(risky)
    ran.clear()
    result = await ctx.tools.execute(call_id="c", name="risky", arguments={})
    assert result.is_error and ran == []
    assert result.error == {"name": "ApprovalError", "code": "APPROVAL"}
    assert "no approval service is mounted" in result.content[0]["text"]


async def test_gate_asks_audits_and_fails_closed(make_ws: Any) -> None:
    ws = await make_ws()
    ws.ctx.tools.register(risky)
    ran.clear()
    result = await ws.run("risky", {"x": "1"})
    assert result.is_error and "approval unavailable" in result.content[0]["text"] and ran == []
    [(asked_type, asked), (decided_type, decided)] = _audit(ws)
    assert (asked_type, decided_type) == ("approval/asked", "approval/decided")
    assert list(asked) == ["id", "toolName", "callId", "reason"] and asked["toolName"] == "risky"
    assert decided == {"id": asked["id"], "outcome": "unavailable"}

    seen: list[ApprovalRequest] = []

    def deny(request: ApprovalRequest) -> str:
        seen.append(request)
        return "rejected"

    ws.ctx.approval.set_asker(deny)
    result = await ws.run("risky", {"x": "2"})
    assert result.is_error and "approval rejected" in result.content[0]["text"] and ran == []
    assert seen[0].arguments == {"x": "2"} and seen[0].tool_name == "risky"

    async def broken(request: ApprovalRequest) -> str:
        raise RuntimeError("terminal gone")

    ws.ctx.approval.set_asker(broken)
    assert (await ws.run("risky", {})).is_error and ran == []

    ws.ctx.approval.set_asker(lambda request: "allowed-once")
    assert (await ws.text("risky", {})) == "did it" and ran == ["risky"]


async def test_allow_for_session_is_remembered_and_folded_on_resume(make_ws: Any) -> None:
    ws = await make_ws()
    ws.ctx.tools.register(risky)
    answers = iter(["allowed-session"])
    ws.ctx.approval.set_asker(lambda request: next(answers))
    assert await ws.text("risky", {}) == "did it"
    assert await ws.text("risky", {}) == "did it"  # no second question (the iterator is empty)
    outcomes = [d["outcome"] for t, d in _audit(ws) if t == "approval/decided"]
    assert outcomes == ["allowed-session", "allowed-session"]
    # A new process on the same log: the rule comes back from the events, no asker needed.
    fresh = await make_ws()
    fresh.ctx.tools.register(risky)
    resumed = Workspace(fresh.ctx, ws.root, ws.agent)
    assert await resumed.text("risky", {}) == "did it"
    # Another session does not inherit it.
    other = Workspace(fresh.ctx, ws.root, make_agent(ws.root, "s2"))
    assert (await other.run("risky", {})).is_error


async def test_never_rejects_without_asking(make_ws: Any) -> None:
    ws = await make_ws(approval="never", approvalRequired=["todo_write"])
    asked: list[Any] = []
    ws.ctx.approval.set_asker(lambda request: asked.append(request) or "allowed-once")
    result = await ws.run("todo_write", {"todos": []})
    assert result.is_error and "approval rejected" in result.content[0]["text"]
    assert asked == []
    assert [d.get("outcome") for t, d in _audit(ws) if t == "approval/decided"] == ["rejected"]


async def test_policy_notice_once_then_on_change(make_ws: Any) -> None:
    ws = await make_ws()
    approval = ws.ctx.approval
    for _ in range(3):
        approval.on_pre_step(ws.agent, 1, 1, "", [], None)
    notices = [e for e in ws.agent.session.events if e.type == "context/message"]
    assert len(notices) == 1
    assert notices[0].data["content"][0]["text"] == f"<system-reminder>\n{ASK_SENTENCE}\n</system-reminder>"
    assert notices[0].data["envelope"] == "raw"
    # A fresh service on the resumed log does not repeat it ...
    fresh = await make_ws()
    fresh.ctx.approval.on_pre_step(ws.agent, 2, 1, "", [], None)
    assert len([e for e in ws.agent.session.events if e.type == "context/message"]) == 1
    # ... but a changed policy is appended, never rewritten.
    changed = await make_ws(approval="never")
    changed.ctx.approval.on_pre_step(ws.agent, 3, 1, "", [], None)
    texts = [e.data["content"][0]["text"] for e in ws.agent.session.events if e.type == "context/message"]
    assert texts[1] == f"<system-reminder>\n{NEVER_SENTENCE}\n</system-reminder>"


async def test_tools_can_be_disabled(make_ws: Any) -> None:
    ws = await make_ws(tools={"bash": False, "write": False})
    names = ws.ctx.tools.names()
    assert "bash" not in names and "write" not in names and "read" in names
    assert {"job_output", "job_list", "job_kill", "edit", "glob", "grep", "todo_write"} <= set(names)
