"""The terminal's inline approval prompt, through a real pseudo-terminal: deny, allow once, allow
for this session (no second question), each audited; plain mode fails closed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.apps.conftest import run_dsh, session_files
from tests.apps.pty_screen import Terminal
from tests.llm.sse_server import Reply, SSEServer, chunk

pytestmark = [pytest.mark.pty, pytest.mark.slow]

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def _bash(n: int, command: str) -> Reply:
    args = json.dumps({"command": command, "description": "Touch a file"})
    return Reply.sse(
        [
            chunk(tool_calls=[{"index": 0, "id": f"call_{n}", "type": "function", "function": {"name": "bash", "arguments": args}}]),
            chunk(finish="tool_calls"),
        ]
    )


def _expect_count(term: Terminal, needle: str, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while term.text().count(needle) < count:
        assert time.monotonic() < deadline, f"timed out waiting for {count}x {needle!r}; screen:\n{term.text()}"
        term.settle(0.2)


def _events(workdir: Path) -> list[dict[str, Any]]:
    [log] = session_files(workdir)
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


def test_inline_prompt_deny_once_session(tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    with SSEServer() as server:
        for n, name in enumerate(["one", "two", "three", "three"], 1):  # the session rule is the exact command
            server.push(_bash(n, f"touch {name}"))
        server.push(Reply.sse([chunk(content="Finished."), chunk(finish="stop")]))
        term = Terminal(
            ["chat", "--base-url", server.base_url, "--model", "test-model", "--sandbox", "danger-full-access"],
            workdir,
        )
        term.expect("Ctrl-D to leave")
        term.type("go\r")
        term.expect("approval needed: bash")
        term.expect("allow?")
        assert "touch one" in term.text()  # the arguments are shown
        assert "?" in [row.rstrip() for row in term.screen.display]  # the question holds the input line
        term.type("n\r")
        _expect_count(term, "approval needed: bash", 2)
        _expect_count(term, "→ rejected", 1)
        term.expect("allow?")
        term.type("y\r")
        _expect_count(term, "approval needed: bash", 3)
        assert "touch three" in term.text()
        term.expect("allow?")
        term.type("s\r")
        screen = term.expect("Finished.")
        assert screen.count("approval needed: bash") == 3  # allowed for the session: no fourth question
        term.expect("test-model · turn 1 ·")
        term.type("\x04")
        assert term.wait() == 0
    assert sorted(p.name for p in workdir.iterdir() if not p.name.startswith(".")) == ["three", "two"]
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
