"""Trial: a reminder worker killed with SIGKILL between delivering a reminder and recording its
``dispatch`` repeats that reminder on the next run; it never loses it.

The worker's model hangs, so the kill lands deterministically inside the reminder turn: the
framing message is on disk (the loop checkpoints before each model call), the dispatch is not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.apps.conftest import dsh_env, run_dsh, session_files
from tests.apps.test_reminders_e2e import events_of, text, tool_call, wait_until_due
from tests.llm.sse_server import Reply, SSEServer
from tests.support.wait import wait_until_sync

pytestmark = pytest.mark.slow

SOURCE = {"kind": "plugin", "plugin": "tool-schedule"}


def framings(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "user/message" and e["data"]["source"].get("plugin") == SOURCE["plugin"]]


def dispatches(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "schedule/change" and e["data"]["operation"] == "dispatch"]


@pytest.mark.sigkill
def test_sigkill_between_delivery_and_dispatch_repeats_and_never_loses(tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    with SSEServer() as server:
        opts = ["--base-url", server.base_url, "--model", "test-model"]
        server.push(tool_call("schedule_create", {"prompt": "call the bank", "after_seconds": 1}), text("Noted."))
        chat = run_dsh(["chat", *opts], workdir, stdin="remind me in 1 s to call the bank\n")
        assert chat.returncode == 0, chat.stderr
        [log] = session_files(workdir)
        wait_until_due(log)

        server.push(Reply.hanging(120))
        victim = subprocess.Popen([sys.executable, "-m", "dsh", "reminders", "run", "--once", *opts],
                                  cwd=workdir, env=dsh_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # The framing is checkpointed before the model call, and the model has been asked.
        wait_until_sync(lambda: framings(events_of(log)) or victim.poll() is not None, 60, "the framing")
        assert victim.poll() is None, victim.communicate()
        wait_until_sync(lambda: len(server.requests) >= 2 + 1, 60, "the reminder turn's model call")
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
        crashed = events_of(log)
        assert len(framings(crashed)) == 1 and dispatches(crashed) == []

        server.push(text("Reminder: call the bank."))
        worker = run_dsh(["reminders", "run", "--once", *opts], workdir)
        assert worker.returncode == 0, worker.stderr
        assert "delivered schedule-1" in worker.stdout

    events = events_of(log)
    # Repeated once, recorded once: two framing messages, one answered turn, one dispatch.
    assert len(framings(events)) == 2 and len(dispatches(events)) == 1
    ends = [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"]
    assert ends[-2:] == ["interrupted", "completed"]  # crash repair closed the killed turn
    answer = [e for e in events if e["type"] == "assistant/message"][-1]
    assert "Reminder: call the bank." in json.dumps(answer["data"])
    assert dispatches(events)[0]["seq"] > max(e["seq"] for e in events if e["type"] == "turn/end")
    again = run_dsh(["reminders", "run", "--once", *opts], workdir)
    assert again.returncode == 0 and "delivered" not in again.stdout
