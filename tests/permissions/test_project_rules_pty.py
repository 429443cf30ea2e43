""""Always allow in this project" in terminal ``dsh chat`` (a real pseudo-terminal): the answer
``r`` keeps the rule in the dsh home, a new process allows the same call without asking (logged
with the rule and its source), ``/permissions`` lists it with its source and removes it, and the
call asks again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apps.pty_screen import Terminal
from tests.llm.sse_server import SSEServer
from tests.permissions.support import Project
from tests.tools.workspace.cli_support import calls, done

pytestmark = [pytest.mark.pty, pytest.mark.slow]


def _chat(project: Project) -> Terminal:
    term = Terminal(
        ["chat", "--base-url", project.server.base_url, "--model", "test-model", "--sandbox", "danger-full-access"],
        project.cwd, **project.env,
    )
    term.expect("Ctrl-D to leave")
    return term


def test_always_allow_in_this_project_survives_and_is_removed(tmp_path: Path, sse_server: SSEServer) -> None:
    project = Project(tmp_path, sse_server)
    (project.cwd / ".mcp.json").unlink()
    stored = project.home / "permissions.json"
    source = f"always allow in this project ({stored})"
    bash = ("bash", {"command": "touch one", "description": "touch"})

    sse_server.push(calls(bash), done("First."))
    term = _chat(project)
    term.type("go\r")
    term.expect("r) always allow in this project: the bash command \"touch one\" exactly  [Bash(touch one)]")
    term.expect("[r] always here")
    term.type("r\r")
    term.expect("First.")
    assert json.loads(stored.read_text())["projects"] == {str(project.cwd): {"allow": ["Bash(touch one)"]}}
    term.type("\x04")
    assert term.wait() == 0

    # A new process: the same call runs without a question.
    sse_server.push(calls(bash, start=2), done("Second."), calls(bash, start=3), done("Third."))
    term = _chat(project)
    term.type("again\r")
    term.expect("Second.")
    assert "approval needed" not in term.text()
    term.type("/permissions\r")
    term.expect("1  allow  Bash(touch one)  (always allow in this project (")  # the path wraps
    term.type("/permissions rm 1\r")
    term.expect("removed allow Bash(touch one) (always allow in this project (")
    assert json.loads(stored.read_text())["projects"] == {}
    term.type("once more\r")
    term.expect("approval needed: bash")
    term.expect("allow?")
    term.type("n\r")
    term.expect("Third.")
    term.type("\x04")
    assert term.wait() == 0
    decided = [d for d in project.decisions()]
    assert [(d["outcome"], d["by"], d.get("rule"), d.get("source")) for d in decided] == [
        ("allowed-once", "rule", "Bash(touch one)", source),
        ("rejected", "person", None, None),
    ]
