"""``dsh chat`` in plain mode, driven as a subprocess, checked against the reference."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest

from tests.apps.conftest import Interactive, run_dsh, session_files
from tests.fixtures import FIXTURES

READING = re.compile(
    r"Time sampled while preparing turn (\d+), step (\d+): "
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00\[Asia/Shanghai\]"
)

E2E_CONFIG = """\
- id: time-context
  name: time-context
- id: echo
  name: echo-llm
  config:
    delayMs: 0
- id: app
  name: stdio-app
  config:
    model: mock-echo
    persona: Test the time-context plugin.
    welcome: time-context e2e ready.
    persistenceRoot: ./.sessions
"""

TOOL_CONFIG = """\
- id: echo
  name: echo-llm
  config:
    delayMs: 0
- id: echo-tool
  name: echo-tool
- id: app
  name: stdio-app
  config:
    model: mock-echo
    welcome: time-context e2e ready.
"""


def normalise(text: str) -> str:
    return READING.sub(lambda m: f"Time sampled while preparing turn {m[1]}, step {m[2]}: <ts>", text)


def events_of(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines[1:]]


@pytest.mark.slow
def test_two_turns_match_the_reference_transcript_and_log(workdir: Path) -> None:
    (workdir / "dsh.yml").write_text(E2E_CONFIG)
    chat = Interactive(["chat", "--config", "dsh.yml"], workdir)
    chat.send("first\n")
    chat.read_until("\n> ", count=2)
    chat.send("second\n")
    rc, out, err = chat.close()
    assert rc == 0, err
    expected = (FIXTURES / "stdio-two-turns.stdout.txt").read_text()
    assert normalise(out) == normalise(expected)

    # The config's persistenceRoot (./.sessions) is next to the config: a project-local store.
    [log] = session_files(workdir, workdir / ".sessions")
    assert re.fullmatch(r"main-session-[0-9a-f-]{36}\.jsonl", log.name)
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    header = json.loads(log.read_text().splitlines()[0])
    assert list(header) == ["type", "version", "id", "createdAt", "cwd"]
    assert header["cwd"] == str(workdir)
    events = events_of(log)
    reference = events_of(FIXTURES / "stdio-two-turns.jsonl")
    assert [e["type"] for e in events] == [e["type"] for e in reference]
    readings = [e for e in events if e["type"] == "context/message"]
    assert [e["seq"] for e in readings] == [2, 210]
    for reading in readings:
        assert list(reading) == ["type", "seq", "time", "data", "surfaceOp"]
        assert reading["data"]["source"] == {"kind": "plugin", "plugin": "time-context"}
        assert "envelope" not in reading["data"]
        assert events[reading["seq"] + 1]["type"] == "step/start"
    headers = [e for e in events if e["type"] == "request/header"]
    assert [h["data"]["reason"] for h in headers] == ["initial"]
    assert "Time sampled" not in json.dumps(headers)
    assert headers[0]["data"]["header"]["system"].endswith("\n\nTest the time-context plugin.")
    # Compact JSON in reference key order, byte for byte.
    for line in log.read_text().splitlines()[1:]:
        assert line == json.dumps(json.loads(line), ensure_ascii=False, separators=(",", ":"))


def test_tool_call_transcript_is_byte_identical(workdir: Path) -> None:
    (workdir / "dsh.yml").write_text(TOOL_CONFIG)
    chat = Interactive(["chat", "--config", "dsh.yml"], workdir)
    chat.send("echo hello world\n")
    chat.read_until("\n> ", count=2)
    chat.send("thanks\n")
    rc, out, err = chat.close()
    assert rc == 0, err
    assert out == (FIXTURES / "stdio-tool-call.stdout.txt").read_text()
    [log] = session_files(workdir)
    types = [e["type"] for e in events_of(log)]
    reference = [e["type"] for e in events_of(FIXTURES / "stdio-tool-call.jsonl")]
    assert types == reference


@pytest.mark.slow
def test_default_composition_prints_a_reply(workdir: Path) -> None:
    result = run_dsh(["chat"], workdir, stdin="hello\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('ready.\n> \n[main turn 1] You said: "hello".')
    assert result.stdout.endswith('Try "echo <something>" to see a tool call.\n> ')
    assert result.stderr == ""
    assert len(session_files(workdir)) == 1


def test_eof_without_input_exits_cleanly_and_writes_nothing(workdir: Path) -> None:
    result = run_dsh(["chat"], workdir, stdin="")
    assert result.returncode == 0
    assert result.stdout == "ready.\n> "
    assert session_files(workdir) == []


def test_queued_lines_all_get_answered_before_exit(workdir: Path) -> None:
    result = run_dsh(["chat"], workdir, stdin="one\ntwo\nthree\n")
    assert result.returncode == 0, result.stderr
    [log] = session_files(workdir)
    events = events_of(log)
    users = [e["data"]["content"][0]["text"] for e in events if e["type"] == "user/message"]
    assert users == ["one", "two", "three"]
    assert events[-1]["type"] == "turn/end"


@pytest.mark.slow
def test_resume_and_continue_extend_the_same_log(workdir: Path) -> None:
    first = run_dsh(["chat"], workdir, stdin="first\n")
    assert first.returncode == 0, first.stderr
    [log] = session_files(workdir)
    before = log.read_bytes()
    session_id = log.stem
    second = run_dsh(["chat", "--resume", session_id], workdir, stdin="second\n")
    assert second.returncode == 0, second.stderr
    assert "[main turn 2]" in second.stdout
    third = run_dsh(["chat", "--continue"], workdir, stdin="third\n")
    assert third.returncode == 0, third.stderr
    assert "[main turn 3]" in third.stdout
    after = log.read_bytes()
    assert after.startswith(before)  # committed bytes never change
    events = events_of(log)
    assert [e["seq"] for e in events] == list(range(len(events)))
    reasons = [e["data"]["reason"] for e in events if e["type"] == "request/header"]
    assert reasons == ["initial", "resume", "resume"]
    readings = [
        e["data"]["content"][0]["text"]
        for e in events
        if e["type"] == "context/message" and e["data"]["source"].get("plugin") == "time-context"
    ]
    assert [r.split(":")[0] for r in readings] == [
        f"Time sampled while preparing turn {n}, step 1" for n in (1, 2, 3)
    ]


@pytest.mark.slow
def test_steering_while_running(workdir: Path) -> None:
    (workdir / "dsh.yml").write_text(E2E_CONFIG.replace("delayMs: 0", "delayMs: 20"))
    chat = Interactive(["chat", "--config", "dsh.yml"], workdir)
    chat.send("first\n")
    chat.read_until("[main turn 1] You")
    chat.send("also this\n")
    rc, out, err = chat.close()
    assert rc == 0, err
    [log] = session_files(workdir, workdir / ".sessions")
    events = events_of(log)
    steering = [e for e in events if e["type"] == "steering/message"]
    assert steering and steering[0]["data"]["content"] == [{"type": "text", "text": "also this"}]
    assert out.count("[main turn") == 1  # steering continued the turn instead of opening another
