"""A reminder due in 2 s fires while the terminal prompt is idle (a real pseudo-terminal, read
through a pyte screen: what a user sees)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.apps.conftest import session_files
from tests.apps.pty_screen import Terminal
from tests.apps.test_reminders_e2e import events_of, text, tool_call
from tests.llm.sse_server import SSEServer

pytestmark = [pytest.mark.pty, pytest.mark.slow]


def test_a_reminder_fires_while_the_prompt_is_idle(workdir: Path) -> None:
    with SSEServer() as server:
        server.push(
            tool_call("schedule_create", {"prompt": "stretch your legs", "after_seconds": 2}),
            text("Reminder set."),
            text("Time to stretch your legs!"),
        )
        term = Terminal(["chat", "--base-url", server.base_url, "--model", "test-model"], workdir)
        term.expect("Ctrl-D to leave")
        term.type("remind me in 2 s to stretch\r")
        term.expect("Reminder set.")
        term.expect("test-model · turn 1 ·")  # the first turn is over: the prompt is idle
        term.type("half-typ")  # left at the idle prompt when the reminder fires
        screen = term.expect("Time to stretch your legs!", timeout=60)
        [reminder] = [row for row in screen.splitlines() if "⏰" in row]
        assert reminder.startswith("⏰ reminder schedule-1 · ") and reminder.endswith(" · stretch your legs")
        assert screen.index("⏰ reminder") < screen.index("Time to stretch your legs!")
        # The turn ends and the input line still holds what was typed before it.
        screen = term.expect("test-model · turn 2 ·", timeout=60)
        assert screen.index("Time to stretch your legs!") < screen.index("test-model · turn 2 ·")
        deadline = time.monotonic() + 30
        while term.prompt_line() != "> half-typ":  # idle again ("↪" while the turn winds down)
            assert time.monotonic() < deadline, term.text()
            term.settle(0.2)
        # Never mixed into the output: the input line is the one row that shows it.
        assert [row for row in term.text().splitlines() if "half-typ" in row] == ["> half-typ"]
        term.type("\x15\x04")  # clear the line, Ctrl-D
        assert term.wait() == 0
        [log] = session_files(workdir)
        events = events_of(log)
        changes = [e["data"]["operation"] for e in events if e["type"] == "schedule/change"]
        assert changes == ["create", "dispatch"]
        framing = [e for e in events if e["type"] == "user/message"
                   and e["data"]["source"].get("plugin") == "tool-schedule"]
        assert len(framing) == 1 and "[SCHEDULE REMINDER]" in json.dumps(framing[0]["data"])
