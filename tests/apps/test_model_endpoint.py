"""An endpoint named with ``--base-url`` serves any model name: ``dsh reminders run --base-url``
serves each session's own recorded model, and terminal ``/model NAME`` switches to any name
(the endpoint's error says when it does not know one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apps.conftest import run_dsh, session_files
from tests.apps.pty_screen import Terminal
from tests.apps.test_reminders_e2e import events_of, text, tool_call, wait_until_due
from tests.llm.sse_server import SSEServer


@pytest.mark.slow
def test_reminders_run_serves_each_sessions_own_model_from_the_endpoint(workdir: Path) -> None:
    with SSEServer() as server:
        server.push(tool_call("schedule_create", {"prompt": "stretch", "after_seconds": 1}), text("Will do."))
        chat = run_dsh(["chat", "--base-url", server.base_url, "--model", "m"], workdir, stdin="remind me\n")
        assert chat.returncode == 0, chat.stderr
        [log] = session_files(workdir)
        wait_until_due(log)
        server.push(text("Time to stretch."))
        worker = run_dsh(["reminders", "run", "--once", "--base-url", server.base_url], workdir)
        assert (worker.returncode, worker.stderr) == (0, "")
        assert "delivered schedule-1" in worker.stdout
        assert server.requests[-1].json["model"] == "m"
        assert "Time to stretch." in json.dumps(events_of(log)[-5:])


@pytest.mark.slow
@pytest.mark.pty
def test_model_switches_to_any_name_on_the_endpoint(workdir: Path) -> None:
    with SSEServer() as server:
        server.push(text("From the other model."))
        term = Terminal(["chat", "--base-url", server.base_url, "--model", "first"], workdir)
        term.expect("Ctrl-D to leave")
        term.type("/model second-model\r")
        term.expect("model: second-model from the next request")
        term.type("hello\r")
        term.expect("From the other model.")
        term.type("\x04")
        assert term.wait() == 0
        assert server.requests[-1].json["model"] == "second-model"
