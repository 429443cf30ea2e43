"""A 30 MB MCP result is cut like ``bash`` output: the model (and the session log) get the tail
and a line stating the cap and naming the spill file, which holds the whole result while the
session runs and is removed when it ends."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.apps.conftest import dsh_env, session_files
from tests.llm.sse_server import Reply, chunk
from tests.mcp.conftest import NO_PROXY, stdio_server, write_mcp_json
from tests.mcp.test_mcp_chat_e2e import calls, tool_messages
from tests.support.wait import wait_until_sync

pytestmark = [pytest.mark.attack, pytest.mark.slow]

SIZE = 30_000_000


def test_a_30_mb_result_is_capped_and_spilled(sse_server: Any, workdir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_mcp_json(
        workdir, {"alpha": stdio_server("alpha", tmp_path, env={"MCP_BIG": str(SIZE)}, approval="trusted",
                                     toolCallTimeoutMs=600_000)},
        trusted_in=home,
    )
    # The final reply is slow, so the spill file can be read while the session still runs.
    final = Reply.sse([chunk(role="assistant", content="done"), chunk(finish="stop")], delay=5)
    sse_server.push(calls(("b1", "mcp__alpha__big", {})), final)
    args = ["run", "go", "--base-url", f"{sse_server.base_url}/v1", "--model", "m"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsh", *args], cwd=workdir, env=dsh_env(DSH_HOME=str(home), **NO_PROXY),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_until_sync(lambda: len(sse_server.requests) >= 2, timeout=300)
        sent = tool_messages(sse_server.requests[1].json)["b1"]
        match = re.search(r"\n\[result truncated to its last 30000 bytes \(of 30000000\); full result: (\S+)\]$", sent)
        assert match, sent[-300:]
        assert len(sent) < 31_000
        assert sent[: match.start()].endswith("THE-END")
        spill = Path(match.group(1))
        assert spill.stat().st_size == SIZE
        assert spill.read_bytes().endswith(b"xxxTHE-END")
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert not spill.exists()  # the session ended: its spill folder is gone
    (log,) = session_files(workdir, home / "sessions")
    assert log.stat().st_size < 200_000
