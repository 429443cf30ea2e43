"""Terminal-mode ``dsh chat`` shows a running subagent under its call (its name, current tool
and elapsed time) and collapses it to one line when it is done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.apps.pty_screen import Terminal
from tests.llm.sse_server import Reply
from tests.plugins.subagent.support import (
    CHILD_MARK,
    NO_PROXY,
    RoutedServer,
    call_reply,
    system_of,
    text_reply,
    tool_messages,
)

pytestmark = [pytest.mark.pty, pytest.mark.slow]


def _route(body: dict[str, Any]) -> Reply:
    done = tool_messages(body)
    if CHILD_MARK in system_of(body):
        if not done:
            return call_reply([("c-g", "glob", {"pattern": "*.txt"})])
        return text_reply("child answer", first_delay=2.0)
    if not done:
        return call_reply([("p-sub", "subagent", {"description": "look around", "prompt": "list the files"})])
    return text_reply("parent answer")


def test_a_running_child_is_shown_under_its_call_then_collapsed(workdir: Path, tmp_path: Path) -> None:
    (workdir / "a.txt").write_text("x\n")
    with RoutedServer(_route) as server:
        term = Terminal(["chat", "--base-url", server.base_url, "--model", "m"], workdir, HOME=str(tmp_path), **NO_PROXY)
        term.expect("/exit to leave")
        term.type("go\r")
        live = term.expect("⤷ general-purpose · glob ·", timeout=60)
        assert "⚙ subagent" in live
        term.expect("parent answer", timeout=60)
        # The reply's text can show in the live area a moment before the finished lines above it
        # are printed: read until the call's result is there too, then check their order.
        screen = term.expect("↳ child answer", timeout=30)
        lines = screen.splitlines()
        done = [n for n, line in enumerate(lines) if "⤷ general-purpose · done ·" in line]
        call = [n for n, line in enumerate(lines) if "⚙ subagent" in line]
        result = [n for n, line in enumerate(lines) if "↳ child answer" in line]
        assert len(done) == 1 and call and result and call[0] < done[0] < result[0]
        assert "⤷ general-purpose · glob" not in screen.split("parent answer")[-1]
        term.type("\x04")
        assert term.wait() == 0
