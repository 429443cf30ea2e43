"""A corrupt session does not stop the reminders worker: ``dsh reminders run`` skips it with one
warning naming the file (once per worker, not once per poll) and serves the others, ``dsh
reminders list`` reports it, and both exit 0 when everything else succeeded."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.apps.conftest import dsh_env, run_dsh, session_files
from tests.apps.test_reminders_e2e import text, tool_call, wait_until_due
from tests.llm.sse_server import SSEServer

pytestmark = pytest.mark.slow


def _corrupt(log: Path) -> None:
    lines = log.read_text().splitlines()
    lines.insert(2, "{not json")  # inside the committed region
    log.write_text("\n".join(lines) + "\n")


def test_a_corrupt_session_is_skipped_once_and_the_others_are_served(tmp_path: Path) -> None:
    broken, good = tmp_path / "broken", tmp_path / "good"
    broken.mkdir()
    good.mkdir()
    assert run_dsh(["chat"], broken, stdin="hello\n").returncode == 0
    [bad_log] = session_files(broken)
    _corrupt(bad_log)
    with SSEServer() as server:
        opts = ["--base-url", server.base_url, "--model", "m"]
        server.push(tool_call("schedule_create", {"prompt": "stretch", "after_seconds": 1}), text("Will do."))
        assert run_dsh(["chat", *opts], good, stdin="remind me\n").returncode == 0
        [good_log] = session_files(good)

        listed = run_dsh(["reminders", "list"], good)
        assert listed.returncode == 0, listed.stderr
        [warning] = listed.stderr.splitlines()
        assert warning.startswith("dsh: skipped session ") and str(bad_log) in warning
        assert "corrupt (skipped; see the warning)" in listed.stdout and "stretch" in listed.stdout

        wait_until_due(good_log)
        server.push(text("Time to stretch."))
        worker = subprocess.Popen(
            [sys.executable, "-m", "dsh", "reminders", "run", "--poll", "0.1", *opts], cwd=good,
            env=dsh_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        deadline = time.monotonic() + 60
        while "Time to stretch." not in good_log.read_text():
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.2)
        time.sleep(1.5)  # many more polls
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "delivered schedule-1" in out
    assert err.count("dsh: skipped session ") == 1 and str(bad_log) in err
    once = run_dsh(["reminders", "run", "--once"], good)
    assert once.returncode == 0 and once.stderr.count("skipped session") == 1
    assert json.loads(bad_log.read_text().splitlines()[0])["type"] == "session"  # left as it was
