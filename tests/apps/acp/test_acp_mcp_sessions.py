"""Client MCP servers belong to their ACP session: one ``dsh acp`` process serves two sessions,
each given its own stdio MCP test server. Each session's model requests list only its own
server's tools, a call reaches its own server, the other session's tool is unknown to it,
``session/close`` stops that session's server only, a resume with the same list keeps the running
server, and once the process has ended no server (nor its guard) is left running."""

from __future__ import annotations

import asyncio
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
from tests.mcp.conftest import alive, pids

pytestmark = pytest.mark.slow


def mcp_tools(request_json: dict[str, object]) -> set[str]:
    tools = request_json.get("tools")
    assert isinstance(tools, list)
    return {t["function"]["name"] for t in tools if t["function"]["name"].startswith("mcp__")}


async def test_each_session_sees_and_calls_only_its_own_mcp_servers(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with SSEServer() as llm:
        llm.push(
            # Session A: its own tool.
            call(1, "mcp__alpha__search", {"q": "one"}),
            say("A done."),
            # Session B: A's tool (unknown here), then its own.
            call(2, "mcp__alpha__search", {"q": "stolen"}),
            call(3, "mcp__beta__search", {"q": "two"}),
            say("B done."),
        )
        args = ["--base-url", llm.base_url, "--model", "test-model"]
        async with dsh_acp(tmp_path, *args, shutdown_timeout=120) as (conn, proc, rec, log):
            await initialize(conn)
            a = (await asyncio.wait_for(conn.new_session(cwd=str(ws), mcp_servers=[mcp_server("alpha", tmp_path)]), 120)).session_id
            b = (await asyncio.wait_for(conn.new_session(cwd=str(ws), mcp_servers=[mcp_server("beta", tmp_path)]), 120)).session_id
            [(alpha_pid, alpha_guard)] = pids(tmp_path / "alpha.pids")
            [(beta_pid, beta_guard)] = pids(tmp_path / "beta.pids")

            rec.answers = ["allow-once"]
            ra = await asyncio.wait_for(conn.prompt(session_id=a, prompt=[text("search in A")]), 120)
            assert ra.stop_reason == "end_turn", stderr_of(log)
            rec.answers = ["allow-once"]
            rb = await asyncio.wait_for(conn.prompt(session_id=b, prompt=[text("search in B")]), 120)
            assert rb.stop_reason == "end_turn", stderr_of(log)

            # The tool list of each request: the session's own MCP tools only.
            seen = [mcp_tools(r.json) for r in llm.requests]
            assert len(seen) == 5
            for tools in seen[:2]:
                assert "mcp__alpha__search" in tools and all(t.startswith("mcp__alpha__") for t in tools)
            for tools in seen[2:]:
                assert "mcp__beta__search" in tools and all(t.startswith("mcp__beta__") for t in tools)
            assert len(seen[0]) == len(seen[2]) > 1  # the same server program: as many tools each

            # Execution: A's call reached A's server; B's call of A's tool reached nothing.
            ends = {(sid, u.tool_call_id): u for sid, u in rec.updates if u.session_update == "tool_call_update"}
            assert ends[(a, "call_1")].status == "completed"
            assert ends[(a, "call_1")].content[0].content.text == "alpha found one"
            assert ends[(b, "call_2")].status == "failed"
            assert ends[(b, "call_2")].content[0].content.text == 'Error: unknown tool "mcp__alpha__search"'
            assert ends[(b, "call_3")].content[0].content.text == "beta found two"
            # Only the two calls that ran were put to the client for approval.
            assert [(q.session_id, q.tool_call.tool_call_id) for q in rec.asked] == [(a, "call_1"), (b, "call_3")]

            # Closing A stops A's server and leaves B's running.
            await asyncio.wait_for(conn.close_session(session_id=a), 120)
            await gone(alpha_pid)
            await gone(alpha_guard)
            assert alive(beta_pid)
            # Resuming B with the list it already has keeps the running server.
            await asyncio.wait_for(conn.resume_session(session_id=b, cwd=str(ws), mcp_servers=[mcp_server("beta", tmp_path)]), 120)
            assert pids(tmp_path / "beta.pids") == [(beta_pid, beta_guard)] and alive(beta_pid)

        assert proc.returncode == 0, stderr_of(log)
        await gone(beta_pid)
        await gone(beta_guard)
