"""A 30 MB MCP result is cut like ``bash`` output: the model (and the session log) get the tail
and a line stating the cap and naming the spill file, which holds the whole result."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.apps.conftest import run_dsh, session_files
from tests.mcp.conftest import NO_PROXY, stdio_server, write_mcp_json
from tests.mcp.test_mcp_chat_e2e import calls, text, tool_messages

pytestmark = [pytest.mark.attack, pytest.mark.slow]

SIZE = 30_000_000


def test_a_30_mb_result_is_capped_and_spilled(sse_server: Any, workdir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_mcp_json(
        workdir, {"alpha": stdio_server("alpha", tmp_path, env={"MCP_BIG": str(SIZE)}, approval="trusted",
                                     toolCallTimeoutMs=600_000)},
        trusted_in=home,
    )
    sse_server.push(calls(("b1", "mcp__alpha__big", {})), text("done"))
    args = ["run", "go", "--base-url", f"{sse_server.base_url}/v1", "--model", "m"]
    result = run_dsh(args, workdir, timeout=300, DSH_HOME=str(home), **NO_PROXY)
    assert result.returncode == 0, result.stderr
    sent = tool_messages(sse_server.requests[1].json)["b1"]
    match = re.search(r"\n\[result truncated to its last 30000 bytes \(of 30000000\); full result: (\S+)\]$", sent)
    assert match, sent[-300:]
    assert len(sent) < 31_000
    assert sent[: match.start()].endswith("THE-END")
    spill = Path(match.group(1))
    try:
        assert spill.stat().st_size == SIZE
        assert spill.read_bytes().endswith(b"xxxTHE-END")
    finally:
        spill.unlink()
    (log,) = session_files(workdir, home / "sessions")
    assert log.stat().st_size < 200_000
