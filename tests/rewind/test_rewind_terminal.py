"""``dsh chat`` in a real pseudo-terminal: the end-of-turn change line and ``/rewind``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apps.conftest import session_files
from tests.apps.pty_screen import Terminal
from tests.llm.sse_server import SSEServer
from tests.rewind.support import NO_PROXY, call, make_repo, text, tree_state

pytestmark = [pytest.mark.pty, pytest.mark.slow]


def test_turn_summary_and_rewind_files_then_conversation(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    before = tree_state(repo)
    with SSEServer() as server:
        server.push(
            call(1, "bash", {"command": "sed -i 's/colour/color/' notes.txt && rm b.txt", "description": "edit"}),
            call(2, "write", {"file_path": "a.txt", "content": "one\ntwo\n"}),
            text("changed three files"),
        )
        term = Terminal(["chat", "--base-url", server.base_url, "--model", "test-model"], repo, **NO_PROXY)
        term.expect("/exit to leave")
        term.type("change things\r")
        term.expect("3 files changed, +4 −3 · /rewind to undo")
        term.type("/rewind\r")
        screen = term.expect("/rewind N: go back to before turn N")
        assert any("change things" in line and "3 files changed, +4 −3" in line for line in screen.splitlines())
        term.type("/rewind 1 files\r")
        term.expect("restored 3 files to before turn 1: a.txt, b.txt, notes.txt")
        assert tree_state(repo) == before
        term.type("/rewind 1\r")
        term.expect("restore (f)iles, (c)onversation, (b)oth?")
        term.type("c\r")
        term.expect("new session main-session-")
        term.type("/exit\r")
        assert term.wait() == 0
    [log] = session_files(repo)  # before turn 1 the conversation is empty: nothing to store
    types = [json.loads(line)["type"] for line in log.read_text().splitlines()[1:]]
    assert types.count("workspace/rewind") == 1 and types[-1] == "workspace/rewind"
