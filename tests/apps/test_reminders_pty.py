"""A reminder due in 2 s fires while the terminal prompt is idle (a real pseudo-terminal)."""

from __future__ import annotations

import json
import os
import select
import time
from pathlib import Path

import pytest

from tests.apps.conftest import session_files
from tests.apps.test_reminders_e2e import events_of, text, tool_call
from tests.apps.test_terminal import Pty
from tests.llm.sse_server import SSEServer

pytestmark = pytest.mark.slow


def test_a_reminder_fires_while_the_prompt_is_idle(workdir: Path) -> None:
    with SSEServer() as server:
        server.push(
            tool_call("schedule_create", {"prompt": "stretch your legs", "after_seconds": 2}),
            text("Reminder set."),
            text("Time to stretch your legs!"),
        )
        term = Pty(["chat", "--base-url", server.base_url, "--model", "test-model"], workdir)
        term.expect("Ctrl-D to leave")
        term.type("remind me in 2 s to stretch\r")
        term.expect("Reminder set.")
        term.type("half-typ")  # left at the idle prompt when the reminder fires
        term.expect("Time to stretch your legs!", timeout=30)
        screen = term.screen.decode(errors="replace")
        assert "⏰ reminder schedule-1" in screen and "stretch your legs" in screen
        assert screen.index("⏰ reminder") < screen.index("Time to stretch your legs!")
        after = screen.index("Time to stretch your legs!")
        deadline = time.monotonic() + 15
        while "> half-typ" not in term.screen.decode(errors="replace")[after:]:
            # The prompt comes back after the turn, with what was typed before it.
            assert time.monotonic() < deadline, term.screen[-500:]
            if select.select([term.master], [], [], 0.1)[0]:
                term.screen += os.read(term.master, 65536)
        term.type("\x15\x04")  # clear the line, Ctrl-D
        assert term.wait() == 0
        [log] = session_files(workdir)
        events = events_of(log)
        changes = [e["data"]["operation"] for e in events if e["type"] == "schedule/change"]
        assert changes == ["create", "dispatch"]
        framing = [e for e in events if e["type"] == "user/message"
                   and e["data"]["source"].get("plugin") == "tool-schedule"]
        assert len(framing) == 1 and "[SCHEDULE REMINDER]" in json.dumps(framing[0]["data"])
