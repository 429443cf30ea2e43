"""``dsh acp``: a subagent's activity reaches the editor as updates of the parent's
``subagent`` call, and its approval question goes to the same client, labelled with the child
and attached to that call; the client's answer decides."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.apps.acp.acp_support import dsh_acp, initialize, stderr_of, text
from tests.llm.sse_server import Reply
from tests.plugins.subagent.support import (
    CHILD_MARK,
    RoutedServer,
    call_reply,
    system_of,
    text_reply,
    tool_messages,
)

pytestmark = pytest.mark.slow


async def test_child_activity_and_approval_reach_the_editor(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside.txt"

    def route(body: dict[str, Any]) -> Reply:
        done = tool_messages(body)
        if CHILD_MARK in system_of(body):
            if not done:
                return call_reply([("c-w", "write", {"file_path": str(outside), "content": "from the child\n"})])
            return text_reply(f"child saw: {done[-1]['content']}")
        if not done:
            return call_reply([("p-sub", "subagent", {"description": "write outside", "prompt": "write the file"})])
        return text_reply("parent done")

    with RoutedServer(route) as server:
        args = ["--base-url", server.base_url, "--model", "m", "--sandbox", "danger-full-access"]
        async with dsh_acp(tmp_path, *args, HOME=str(tmp_path)) as (conn, _proc, rec, log):
            rec.answers = ["allow-once"]
            await initialize(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            reply = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("go")]), 60)
            assert reply.stop_reason == "end_turn", stderr_of(log)
            listed = await asyncio.wait_for(conn.list_sessions(cwd=str(ws)), 30)
            assert [s.session_id for s in listed.sessions] == [sid]  # the child is not an editor session
    assert outside.read_text() == "from the child\n"
    assert len(rec.asked) == 1
    asked = rec.asked[0]
    assert asked.session_id == sid
    assert asked.tool_call.tool_call_id == "p-sub"
    assert asked.tool_call.title is not None and asked.tool_call.title.startswith("[subagent general-purpose] ")
    progress = [
        u.content[0].content.text
        for _, u in rec.updates
        if u.session_update == "tool_call_update" and u.tool_call_id == "p-sub" and u.status == "in_progress"
    ]
    assert [p.split(" · ")[:2] for p in progress] == [["general-purpose", "write"], ["general-purpose", "done"]]
    final = [u for _, u in rec.updates if u.session_update == "tool_call_update" and u.tool_call_id == "p-sub" and u.status == "completed"]
    assert len(final) == 1
    assert rec.text().endswith("parent done")
