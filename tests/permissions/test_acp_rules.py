"""``dsh acp``: rules from flags decide before the client is asked, and the client's
``reject_always`` answer becomes a session deny rule (the next call is refused without asking,
and the rule is logged as the decision's ``scope``)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from tests.apps.acp.acp_support import call, dsh_acp, initialize, mcp_server, say, stderr_of, text
from tests.llm.sse_server import SSEServer

pytestmark = pytest.mark.slow


def _decided() -> list[dict[str, object]]:
    log_path = next((Path(os.environ["DSH_HOME"]) / "sessions").glob("*/*.jsonl"))
    events = [json.loads(line) for line in log_path.read_text().splitlines()[1:]]
    return [e["data"] for e in events if e["type"] == "approval/decided"]


async def test_flags_decide_first_and_reject_always_is_a_session_rule(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with SSEServer() as server:
        server.push(
            call(1, "mcp__docs__search", {"q": "one"}),  # allowed by --allow: not asked
            call(2, "mcp__docs__fail", {}),  # asked: reject always
            call(3, "mcp__docs__fail", {}),  # refused by the session rule: not asked
            say("Done."),
        )
        args = ["--base-url", server.base_url, "--model", "test-model", "--allow", "mcp__docs__search"]
        async with dsh_acp(tmp_path, *args) as (conn, _proc, rec, log):
            await initialize(conn)
            docs = mcp_server("docs", tmp_path)
            sid = (await asyncio.wait_for(conn.new_session(cwd=str(ws), mcp_servers=[docs]), 60)).session_id
            rec.answers = ["reject-always"]
            result = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("go")]), 60)
            assert result.stop_reason == "end_turn", stderr_of(log)
            assert [a.tool_call.tool_call_id for a in rec.asked] == ["call_2"]
            assert "reject_always" in [o.kind for o in rec.asked[0].options]
            ends = [u for _, u in rec.updates if u.session_update == "tool_call_update"]
            assert ends[0].content[0].content.text == "docs found one"
    decided = [(d["outcome"], d.get("by"), d.get("rule") or d.get("scope"), d.get("source")) for d in _decided()]
    assert decided == [
        ("allowed-once", "rule", "mcp__docs__search", "--allow"),
        ("rejected", "person", "mcp__docs__fail", None),
        ("rejected", "rule", "mcp__docs__fail", "session"),
    ]
