"""An MCP tool annotated ``readOnlyHint`` gets no snapshot before its step; an unannotated one
does (``dsh chat`` with a real stdio MCP server and a scripted model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apps.conftest import run_dsh, session_files
from tests.llm.sse_server import SSEServer
from tests.mcp.conftest import stdio_server, write_mcp_json
from tests.rewind.support import NO_PROXY, call, events_of, text

pytestmark = [pytest.mark.slow]


def test_read_only_mcp_tools_take_no_snapshot(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    write_mcp_json(repo, {"alpha": stdio_server("alpha", tmp_path, approval="trusted")})
    with SSEServer() as server:
        server.push(call(1, "mcp__alpha__peek", {"q": "x"}), call(2, "mcp__alpha__search", {"q": "y"}), text("done"))
        chat = run_dsh(["chat", "--base-url", server.base_url, "--model", "test-model"], repo,
                       stdin="go\n", timeout=240, **NO_PROXY)
    assert chat.returncode == 0, chat.stderr
    [log] = session_files(repo)
    events = events_of(log)
    results = [json.dumps(e["data"]["content"]) for e in events if e["type"] == "tool/result"]
    assert "alpha peeked at x" in results[0] and "alpha found y" in results[1]
    snaps = [(e["data"]["step"], e["data"]["at"]) for e in events if e["type"] == "workspace/snapshot"]
    assert snaps == [(2, "before-step"), (3, "turn-end")]
