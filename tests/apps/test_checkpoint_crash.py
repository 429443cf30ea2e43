"""A process killed while the model is generating keeps the turn's prompt, and resume closes it."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.apps.conftest import Interactive, run_dsh, session_files

SLOW = """\
- id: echo
  name: echo-llm
  config: {delayMs: 50}
- id: clock
  name: time-context
- id: app
  name: stdio-app
  config: {model: mock-echo}
"""


@pytest.mark.sigkill
@pytest.mark.slow
def test_kill_during_generation_keeps_the_prompt_for_repair(workdir: Path) -> None:
    (workdir / "slow.yml").write_text(SLOW)
    chat = Interactive(["chat", "--config", "slow.yml"], workdir)
    chat.send("a prompt worth keeping\n")
    chat.read_until('You said: "Ti')  # the model is mid-reply
    chat.proc.send_signal(signal.SIGKILL)
    chat.proc.wait()
    [log] = session_files(workdir)
    events = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    types = [e["type"] for e in events]
    assert types[:5] == ["turn/start", "user/message", "context/message", "step/start", "request/header"]
    assert events[1]["data"]["content"] == [{"type": "text", "text": "a prompt worth keeping"}]
    assert "turn/end" not in types

    resumed = run_dsh(["chat", "--resume", log.stem], workdir, stdin="next\n")
    assert resumed.returncode == 0, resumed.stderr
    assert "[main turn 2]" in resumed.stdout
    after = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    closers = after[len(events) : len(events) + 2]
    assert [c["type"] for c in closers] == ["step/end", "turn/end"]
    assert closers[1]["data"] == {"turn": 1, "reason": {"kind": "interrupted"}}
    assert [e["seq"] for e in after] == list(range(len(after)))
