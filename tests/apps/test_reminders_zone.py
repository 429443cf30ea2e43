"""A reminder is delivered with the zone of the turn that created it: ``dsh chat --time-zone
Asia/Tokyo`` creates it through a scripted model, and ``dsh reminders run`` under ``TZ=UTC`` (a
server elsewhere) delivers it; the reminder turn's reading is in Tokyo time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.apps.conftest import run_dsh, session_files
from tests.apps.test_reminders_e2e import events_of, text, tool_call, wait_until_due
from tests.llm.sse_server import SSEServer

LINE = "Browser time zone for this request: Asia/Tokyo. Interpret otherwise-unqualified dates and times in this zone."


@pytest.mark.slow
def test_the_worker_delivers_in_the_zone_the_reminder_was_created_in(tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    with SSEServer() as server:
        server.push(tool_call("schedule_create", {"prompt": "call mum", "after_seconds": 1}), text("Noted."))
        opts = ["--base-url", server.base_url, "--model", "test-model"]
        chat = run_dsh(["chat", *opts, "--time-zone", "Asia/Tokyo"], workdir, stdin="remind me\n", TZ="UTC")
        assert chat.returncode == 0, chat.stderr
        [log] = session_files(workdir)
        wait_until_due(log)
        server.push(text("Time to call mum."))
        worker = run_dsh(["reminders", "run", "--once", *opts], workdir, TZ="UTC")
        assert worker.returncode == 0, worker.stderr
        assert "delivered schedule-1" in worker.stdout
    events = events_of(log)
    [framing] = [e for e in events if e["type"] == "user/message" and e["data"]["source"].get("plugin") == "tool-schedule"]
    assert framing["data"]["source"] == {"kind": "plugin", "plugin": "tool-schedule", "clientTimeZone": "Asia/Tokyo"}
    reading = next(
        e["data"]["content"][0]["text"] for e in events
        if e["seq"] > framing["seq"] and e["type"] == "context/message"
        and e["data"]["source"] == {"kind": "plugin", "plugin": "time-context"}
    )
    first, zone_line, _ = reading.split("\n")
    assert first.startswith("Time sampled while preparing turn 2, step 1: ") and first.endswith("+09:00[Asia/Tokyo]")
    assert zone_line == LINE
    session_id = log.stem
    shown = run_dsh(["sessions", "show", session_id], workdir, TZ="UTC")
    assert "⏰ reminder schedule-1 · " in shown.stdout and "call mum  · zone Asia/Tokyo" in shown.stdout
