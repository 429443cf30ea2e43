"""A session created over ACP (``dsh acp``) takes snapshots like ``dsh chat``, and the CLI
rewinds it: ``dsh sessions diff`` shows the ``bash`` edit, ``dsh sessions rewind`` undoes it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.apps.acp.acp_support import call, dsh_acp, initialize, say, stderr_of, text
from tests.apps.conftest import run_dsh
from tests.llm.sse_server import SSEServer

pytestmark = [pytest.mark.slow]


async def test_cli_rewinds_an_acp_session(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("one\n")
    with SSEServer() as server:
        server.push(call(1, "bash", {"command": "echo two >> f.txt", "description": "append"}), say("Done."))
        args = ["--base-url", server.base_url, "--model", "test-model"]
        async with dsh_acp(tmp_path, *args) as (conn, _proc, _rec, log):
            await initialize(conn)
            sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
            done = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("append")]), 60)
            assert done.stop_reason == "end_turn", stderr_of(log)
    assert (ws / "f.txt").read_text() == "one\ntwo\n"
    diff = await asyncio.to_thread(run_dsh, ["sessions", "diff", sid, "--turn", "1"], ws)
    assert diff.returncode == 0 and "+two" in diff.stdout, diff.stderr
    back = await asyncio.to_thread(run_dsh, ["sessions", "rewind", sid, "--to-turn", "1"], ws)
    assert back.returncode == 0, back.stderr
    assert back.stdout.strip() == "restored 1 file to before turn 1: f.txt"
    assert (ws / "f.txt").read_text() == "one\n"
