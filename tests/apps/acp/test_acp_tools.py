"""``dsh acp`` with a scripted OpenAI-compatible server that calls the workspace tools: reasoning
as agent_thought_chunk, write/edit as tool calls with diffs, todo_write as a plan, permission
requests (writes outside the workspace under ``danger-full-access``) answered allow, reject,
cancelled and not at all (cancel while asked): each refusal fails closed."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.apps.acp.acp_support import (
    call,
    dsh_acp,
    gone,
    initialize,
    mcp_server,
    say,
    stderr_of,
    text,
)
from tests.llm.sse_server import SSEServer
from tests.mcp.conftest import pids

pytestmark = pytest.mark.slow


async def test_workspace_tools_and_permissions(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside_ok, outside_no, outside_cancel = tmp_path / "ok.txt", tmp_path / "no.txt", tmp_path / "cancel.txt"
    todos = [{"content": "write notes", "status": "completed"}, {"content": "fix typo", "status": "in_progress"}]
    with SSEServer() as server:
        server.push(
            call(1, "write", {"file_path": "notes.md", "content": "helo\n"}, reasoning="I should write notes."),
            call(2, "edit", {"file_path": "notes.md", "old_string": "helo", "new_string": "hello"}),
            call(3, "todo_write", {"todos": todos}),
            say("Wrote and fixed notes.md."),
            call(4, "write", {"file_path": str(outside_ok), "content": "allowed\n"}),
            call(5, "write", {"file_path": str(outside_no), "content": "rejected\n"}),
            call(6, "write", {"file_path": str(outside_cancel), "content": "cancelled\n"}),
            say("Done outside."),
            call(7, "write", {"file_path": str(tmp_path / "hang.txt"), "content": "never\n"}),
        )
        args = ["--base-url", server.base_url, "--model", "test-model", "--sandbox", "danger-full-access"]
        async with dsh_acp(tmp_path, *args) as (conn, _proc, rec, log):
            await initialize(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id

            r1 = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("write notes")]), 60)
            assert r1.stop_reason == "end_turn", stderr_of(log)
            assert (ws / "notes.md").read_text() == "hello\n"
            assert rec.text("agent_thought_chunk") == "I should write notes."
            assert rec.text() == "Wrote and fixed notes.md."
            starts = [u for _, u in rec.updates if u.session_update == "tool_call"]
            assert [(s.title, s.kind) for s in starts] == [
                ("write notes.md", "edit"),
                ("edit notes.md", "edit"),
                ("update plan", "think"),
            ]
            write_diff, edit_diff = starts[0].content[0], starts[1].content[0]
            assert (write_diff.type, write_diff.path, write_diff.old_text, write_diff.new_text) == (
                "diff", str(ws / "notes.md"), None, "helo\n"
            )
            assert (edit_diff.old_text, edit_diff.new_text) == ("helo", "hello")
            ends = [u for _, u in rec.updates if u.session_update == "tool_call_update"]
            assert [u.status for u in ends] == ["completed"] * 3
            plans = [u for _, u in rec.updates if u.session_update == "plan"]
            assert [(e.content, e.status) for e in plans[-1].entries] == [
                ("write notes", "completed"),
                ("fix typo", "in_progress"),
            ]
            assert rec.asked == []  # inside the workspace nothing asks

            # Outside the workspace each write asks the client: allow, reject, cancelled.
            rec.clear()
            rec.answers = ["allow-once", "reject", "cancelled"]
            r2 = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("write outside")]), 60)
            assert r2.stop_reason == "end_turn", stderr_of(log)
            assert len(rec.asked) == 3
            asked = rec.asked[0]
            assert [o.kind for o in asked.options] == ["allow_once", "allow_always", "reject_once", "reject_always"]
            assert asked.tool_call.tool_call_id == "call_4" and asked.tool_call.kind == "edit"
            assert asked.tool_call.content[0].path == str(outside_ok)
            assert outside_ok.read_text() == "allowed\n"
            assert not outside_no.exists() and not outside_cancel.exists()
            ends = [u for _, u in rec.updates if u.session_update == "tool_call_update"]
            assert [u.status for u in ends] == ["completed", "failed", "failed"]
            assert "approval rejected" in ends[1].content[0].content.text
            assert "approval cancelled" in ends[2].content[0].content.text

            # A client that never answers: the turn can still be cancelled, and nothing is written.
            rec.clear()
            rec.answers = ["hang"]
            running = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text("write again")]))
            await rec.wait_for(lambda: len(rec.asked) == 4)
            await conn.cancel(session_id=sid)
            r3 = await asyncio.wait_for(running, 60)
            assert r3.stop_reason == "cancelled"
            assert not (tmp_path / "hang.txt").exists()

    log_path = next((Path(os.environ["DSH_HOME"]) / "sessions").glob("*/*.jsonl"))
    events = [json.loads(line) for line in log_path.read_text().splitlines()[1:]]
    decided = [e["data"]["outcome"] for e in events if e["type"] == "approval/decided"]
    assert decided == ["allowed-once", "rejected", "cancelled", "cancelled"]


async def test_client_mcp_servers_are_connected_for_the_session(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with SSEServer() as server:
        server.push(
            call(1, "mcp__docs__search", {"q": "acp"}),
            call(2, "mcp__docs__search", {"q": "again"}),
            say("Found it."),
        )
        args = ["--base-url", server.base_url, "--model", "test-model"]
        async with dsh_acp(tmp_path, *args) as (conn, _proc, rec, log):
            await initialize(conn)
            docs = mcp_server("docs", tmp_path)
            sid = (await asyncio.wait_for(conn.new_session(cwd=str(ws), mcp_servers=[docs]), 60)).session_id
            rec.answers = ["allow-always"]
            r1 = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("search")]), 60)
            assert r1.stop_reason == "end_turn", stderr_of(log)
            tools = [t["function"]["name"] for t in server.requests[0].json["tools"]]
            assert "mcp__docs__search" in tools
            # Allow always: asked once, the second call runs without asking.
            assert len(rec.asked) == 1 and rec.asked[0].tool_call.tool_call_id == "call_1"
            ends = [u for _, u in rec.updates if u.session_update == "tool_call_update"]
            assert [u.content[0].content.text for u in ends] == ["docs found acp", "docs found again"]

            # A resume with another list replaces the servers: the old one stops, its tools go.
            [(docs_pid, _guard)] = pids(tmp_path / "docs.pids")
            await asyncio.wait_for(conn.resume_session(session_id=sid, cwd=str(ws), mcp_servers=[]), 60)
            await gone(docs_pid)
            server.push(say("No tools."))
            r2 = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("search")]), 60)
            assert r2.stop_reason == "end_turn", stderr_of(log)
            tools = [t["function"]["name"] for t in server.requests[-1].json["tools"]]
            assert not [t for t in tools if t.startswith("mcp__")]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
async def test_bash_shows_command_and_output(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with SSEServer() as server:
        server.push(call(1, "bash", {"command": "echo from-bash", "description": "Say hi"}), say("Ran it."))
        args = ["--base-url", server.base_url, "--model", "test-model"]
        async with dsh_acp(tmp_path, *args) as (conn, _proc, rec, log):
            await initialize(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            r1 = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("run")]), 60)
            assert r1.stop_reason == "end_turn", stderr_of(log)
            start = next(u for _, u in rec.updates if u.session_update == "tool_call")
            end = next(u for _, u in rec.updates if u.session_update == "tool_call_update")
            assert (start.title, start.kind) == ("Say hi", "execute")
            assert start.content[0].content.text == "$ echo from-bash"
            assert end.status == "completed", end.content
            assert "from-bash" in end.content[0].content.text
