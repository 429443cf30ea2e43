"""The keyless first run does what it says: ``echo hello`` calls the ``echo`` tool (issue 12)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apps.conftest import run_dsh, session_files


@pytest.mark.slow
def test_echo_line_calls_the_echo_tool_in_the_default_composition(workdir: Path) -> None:
    result = run_dsh(["chat"], workdir, stdin="echo hello\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "ready.\n> \n[main turn 1] Let me echo that for you.\n"
        '  [tool call] echo({"text":"hello"})\n'
        "  [tool result] ECHO: HELLO\n"
        "  The echo tool has spoken.\n> "
    )
    [log] = session_files(workdir)
    events = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    types = [e["type"] for e in events if e["type"] != "assistant/chunk"]
    # Time readings still precede both steps; the model answered the typed text regardless.
    readings = [
        e for e in events
        if e["type"] == "context/message" and e["data"]["source"].get("plugin") == "time-context"
    ]
    assert len(readings) == 2
    assert types.count("tool/call") == types.count("tool/result") == 1
    assert events[-1]["data"]["reason"] == {"kind": "completed"}
