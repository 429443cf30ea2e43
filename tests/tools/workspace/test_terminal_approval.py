"""The terminal's inline approval prompt, through a real pseudo-terminal: deny, allow once, allow
for this session (no second question), each audited; plain mode fails closed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.apps.conftest import run_dsh, session_files
from tests.apps.test_terminal import Pty
from tests.llm.sse_server import Reply, SSEServer, chunk

pytestmark = pytest.mark.slow

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def _bash(n: int, command: str) -> Reply:
    args = json.dumps({"command": command, "description": "Touch a file"})
    return Reply.sse(
        [
            chunk(tool_calls=[{"index": 0, "id": f"call_{n}", "type": "function", "function": {"name": "bash", "arguments": args}}]),
            chunk(finish="tool_calls"),
        ]
    )


def _events(workdir: Path) -> list[dict[str, Any]]:
    [log] = session_files(workdir)
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


def test_inline_prompt_deny_once_session(tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    with SSEServer() as server:
        for n, name in enumerate(["one", "two", "three", "four"], 1):
            server.push(_bash(n, f"touch {name}"))
        server.push(Reply.sse([chunk(content="Finished."), chunk(finish="stop")]))
        term = Pty(
            ["chat", "--base-url", server.base_url, "--model", "test-model", "--sandbox", "danger-full-access"],
            workdir,
        )
        term.expect("Ctrl-D to leave")
        time.sleep(0.3)
        term.type("go\r")
        term.expect("approval needed: bash")
        assert "touch one" in term.screen.decode(errors="replace")  # the arguments are shown
        term.expect("allow?")
        term.type("n\r")
        term.expect("approval needed: bash", timeout=30)
        term.screen = term.screen[term.screen.rfind(b"approval needed"):]
        term.expect("allow?")
        term.type("y\r")
        term.expect("touch three")
        term.expect("allow?")
        term.type("s\r")
        term.expect("Finished.")
        time.sleep(0.3)
        term.type("\x04")
        assert term.wait() == 0
    assert sorted(p.name for p in workdir.iterdir() if not p.name.startswith(".")) == ["four", "three", "two"]
    events = _events(workdir)
    decided = [e["data"]["outcome"] for e in events if e["type"] == "approval/decided"]
    assert decided == ["rejected", "allowed-once", "allowed-session", "allowed-session"]
    asked = [e["data"] for e in events if e["type"] == "approval/asked"]
    assert all(a["toolName"] == "bash" and a["reason"] for a in asked)
    results = [e["data"] for e in events if e["type"] == "tool/result"]
    assert results[0]["isError"] and "approval rejected" in results[0]["content"][0]["text"]
    assert not any(r["isError"] for r in results[1:])


def test_plain_mode_has_no_one_to_ask(tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    with SSEServer() as server:
        server.push(_bash(1, "touch nope"))
        server.push(Reply.sse([chunk(content="ok"), chunk(finish="stop")]))
        result = run_dsh(
            ["chat", "--base-url", server.base_url, "--model", "test-model", "--sandbox", "danger-full-access"],
            workdir, stdin="go\n", **NO_PROXY,
        )
    assert result.returncode == 0, result.stderr
    assert not (workdir / "nope").exists()
    assert "approval unavailable" in result.stdout
    decided = [e["data"]["outcome"] for e in _events(workdir) if e["type"] == "approval/decided"]
    assert decided == ["unavailable"]


def test_bad_flags_are_usage_errors(tmp_path: Path) -> None:
    result = run_dsh(["chat", "--sandbox", "wide-open"], tmp_path)
    assert result.returncode == 2 and "invalid choice" in result.stderr and "Traceback" not in result.stderr
    result = run_dsh(["chat", "--approval", "sometimes"], tmp_path)
    assert result.returncode == 2
