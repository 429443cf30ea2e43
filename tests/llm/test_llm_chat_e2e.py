"""``dsh chat`` with a real model: the whole process against a loopback chat-completions server.

Each test runs the real ``dsh chat`` command in a subprocess, on the default composition (no
config file: ``openai-llm`` in place of the echo model, ``echo-tool``, ``time-context`` and JSONL
sessions under ``$DSH_HOME/sessions``), against :class:`sse_server.SSEServer`, and checks what reached
the wire, what the user saw, what the session log holds, and that the API key leaked nowhere.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sse_server import Recorded, Reply, SSEServer, chunk, usage_chunk
from tests.apps.conftest import Interactive, default_root, run_dsh, session_files

KEY = "sk-e2e-SECRET-xyz"
# Loopback traffic must never go through a proxy the machine happens to configure.
NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
WIRE_READING = re.compile(
    r'<context source="plugin">Time sampled while preparing turn (\d+), step (\d+): '
    r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00)\[Asia/Shanghai\]\n"
    # The default composition's zone line: the prompt carries the terminal's zone (TZ).
    r"Browser time zone for this request: Asia/Shanghai\. Interpret otherwise-unqualified dates and times in this zone\.\n"
    r"Elapsed since the preceding (?:model-visible message|step context): [^\n]+\.</context>",
)
USAGE = {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
# The default composition: echo-tool plus the schedule plugin's three tools (sorted by name).
DEFAULT_TOOLS = ["echo", "schedule_create", "schedule_delete", "schedule_list"]


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    cwd = tmp_path / "project"
    cwd.mkdir()
    return cwd


@pytest.fixture
def spawn(workdir: Path) -> Iterator[Callable[..., Interactive]]:
    """Start ``dsh`` interactively in ``workdir``; anything still running is killed afterwards."""
    started: list[Interactive] = []

    def start(args: list[str], **env: str) -> Interactive:
        chat = Interactive(args, workdir, **NO_PROXY, **env)
        started.append(chat)
        return chat

    yield start
    for chat in started:
        if chat.proc.poll() is None:
            chat.proc.kill()
            chat.proc.wait(timeout=10)
        for pipe in (chat.proc.stdin, chat.proc.stdout, chat.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def tool_call_script(server: SSEServer) -> None:
    """Request 1: text, then ``echo({"text":"hi"})`` in fragments; request 2: text, ``stop``."""
    server.push(
        Reply.sse(
            [
                chunk(role="assistant", content="Let me "),
                chunk(content="echo that."),
                chunk(
                    tool_calls=[
                        {
                            "index": 0,
                            "id": "call_e2e_1",
                            "type": "function",
                            "function": {"name": "echo", "arguments": ""},
                        }
                    ]
                ),
                chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"text":'}}]),
                chunk(tool_calls=[{"index": 0, "function": {"arguments": '"hi"}'}}]),
                chunk(finish="tool_calls"),
                usage_chunk(USAGE),
            ]
        ),
        Reply.sse([chunk(content="Done: "), chunk(content="ECHO: HI."), chunk(finish="stop")]),
    )


def events_of(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


def only_log(cwd: Path) -> Path:
    logs = session_files(cwd)
    assert len(logs) == 1, logs
    return logs[0]


def turn_ends(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"]["reason"] for e in events if e["type"] == "turn/end"]


def log_readings(events: list[dict[str, Any]]) -> list[str]:
    """Each time-context reading of the log as the wire carries it (in its context wrapper)."""
    return [
        '<context source="plugin">'
        + "".join(b["text"] for b in e["data"]["content"] if b.get("type") == "text")
        + "</context>"
        for e in events
        if e["type"] == "context/message"
        and (e["data"].get("source") or {}).get("plugin") == "time-context"
    ]


def harness_free(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` without the harness's one-time ``<system-reminder>`` notices (the approval
    policy, workspace instructions), which these time-context tests do not look at."""
    return [
        m
        for m in messages
        if not (isinstance(m.get("content"), str) and m["content"].startswith("<system-reminder>"))
    ]


def wire_readings(messages: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    """``(turn, step, timestamp)`` of every reading among ``messages`` (each a user message)."""
    found = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str) and "Time sampled" in content:
            assert message["role"] == "user", message
            match = WIRE_READING.fullmatch(content)
            assert match, content
            found.append((int(match[1]), int(match[2]), match[3]))
    return found


def assert_in_order(readings: list[tuple[int, int, str]]) -> None:
    assert [(t, s) for t, s, _ in readings] == sorted((t, s) for t, s, _ in readings)
    stamps = [datetime.fromisoformat(ts) for _, _, ts in readings]
    assert stamps == sorted(stamps)


def assert_key_only_in_auth(requests: list[Recorded]) -> None:
    for req in requests:
        assert req.headers.get("authorization") == f"Bearer {KEY}"
        others = {k: v for k, v in req.headers.items() if k != "authorization"}
        assert KEY not in json.dumps(others)
        assert KEY.encode() not in req.body


def assert_key_nowhere(root: Path, *texts: str) -> None:
    """No trace of the key in ``texts``, under ``root`` or under ``$DSH_HOME`` (the session store)."""
    for text in texts:
        assert KEY not in text
    files = [p for base in (root, default_root()) for p in base.rglob("*") if p.is_file()]
    assert files  # at least the session log
    for path in files:
        assert KEY.encode() not in path.read_bytes(), path


def assert_seqs_contiguous(events: list[dict[str, Any]]) -> None:
    assert [e["seq"] for e in events] == list(range(len(events)))


# --------------------------------------------------------------------------- tests


@pytest.mark.slow
@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug-logs"])
def test_tool_calling_turn_with_time_context_over_base_url(
    sse_server: SSEServer, workdir: Path, tmp_path: Path, debug: bool
) -> None:
    tool_call_script(sse_server)
    args = ["chat", "--base-url", f"{sse_server.base_url}/v1", "--model", "test-model"]
    result = run_dsh(
        ["--debug", *args] if debug else args,
        workdir,
        stdin="hello\n",
        DEEPSEEK_API_KEY=KEY,
        **NO_PROXY,
    )

    assert result.returncode == 0, result.stderr
    if not debug:
        assert result.stderr == ""
    assert "Traceback" not in result.stderr
    out = result.stdout
    assert out.startswith("ready.\n> \n[main turn 1] Let me echo that.")
    assert '[tool call] echo({"text":"hi"})' in out
    assert "[tool result] ECHO: HI" in out
    assert out.endswith("Done: ECHO: HI.\n> ")

    assert len(sse_server.requests) == 2
    first, second = (r.json for r in sse_server.requests)
    for req in sse_server.requests:
        assert (req.method, req.path) == ("POST", "/v1/chat/completions")
    for body in (first, second):
        assert body["model"] == "test-model"
        assert body["stream"] is True
        assert "echo" in [t["function"]["name"] for t in body["tools"]]

    m1 = harness_free(first["messages"])
    assert [m["role"] for m in m1] == ["system", "user", "user"]
    assert isinstance(m1[0]["content"], str) and m1[0]["content"]
    assert m1[1]["content"] == "hello"
    assert m1[2]["content"].startswith(
        '<context source="plugin">Time sampled while preparing turn 1, step 1: '
    )

    m2 = harness_free(second["messages"])
    assert m2[:3] == m1  # the history is replayed verbatim
    assert [m["role"] for m in m2[3:]] == ["assistant", "tool", "user"]
    assistant, tool, reading = m2[3:]
    assert assistant["content"] == "Let me echo that."
    assert assistant["tool_calls"] == [
        {
            "id": "call_e2e_1",
            "type": "function",
            "function": {"name": "echo", "arguments": '{"text":"hi"}'},
        }
    ]
    assert tool == {"role": "tool", "tool_call_id": "call_e2e_1", "content": "ECHO: HI"}
    assert reading["content"].startswith(
        '<context source="plugin">Time sampled while preparing turn 1, step 2: '
    )

    readings = wire_readings(m2)
    assert [(t, s) for t, s, _ in readings] == [(1, 1), (1, 2)]
    assert_in_order(readings)
    assert wire_readings(m1) == readings[:1]

    log = only_log(workdir)
    events = events_of(log)
    assert_seqs_contiguous(events)
    # The server got exactly the readings the log recorded, in the same order.
    assert log_readings(events) == [m1[2]["content"], reading["content"]]
    assert turn_ends(events) == [{"kind": "completed"}]
    assert [e["data"]["name"] for e in events if e["type"] == "tool/call"] == ["echo"]

    assert_key_only_in_auth(sse_server.requests)
    assert_key_nowhere(tmp_path, result.stdout, result.stderr)


@pytest.mark.slow
def test_deepseek_model_needs_no_config_file(
    sse_server: SSEServer, workdir: Path, tmp_path: Path
) -> None:
    sse_server.push(Reply.sse([chunk(content="Hi "), chunk(content="there."), chunk(finish="stop")]))
    result = run_dsh(
        ["chat", "--model", "deepseek-v4-flash"],
        workdir,
        stdin="hello\n",
        DEEPSEEK_API_KEY=KEY,
        DEEPSEEK_BASE_URL=sse_server.base_url,
        **NO_PROXY,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout == "ready.\n> \n[main turn 1] Hi there.\n> "

    [req] = sse_server.requests
    assert (req.method, req.path) == ("POST", "/chat/completions")
    body = req.json
    assert body["model"] == "deepseek-v4-flash"
    assert "echo" in [t["function"]["name"] for t in body["tools"]]
    messages = harness_free(body["messages"])
    assert [m["role"] for m in messages] == ["system", "user", "user"]
    assert messages[1]["content"] == "hello"
    assert [(t, s) for t, s, _ in wire_readings(messages)] == [(1, 1)]

    events = events_of(only_log(workdir))
    assert turn_ends(events) == [{"kind": "completed"}]
    assert log_readings(events) == [messages[2]["content"]]
    assert not [p for p in workdir.iterdir() if p.name != ".sessions"]  # no config file anywhere

    assert_key_only_in_auth(sse_server.requests)
    assert_key_nowhere(tmp_path, result.stdout, result.stderr)


@pytest.mark.slow
def test_errors_end_the_turn_and_the_next_prompt_works(
    sse_server: SSEServer, spawn: Callable[..., Interactive], workdir: Path, tmp_path: Path
) -> None:
    sse_server.push(
        # Providers like to quote the rejected key back.
        Reply.error(401, f"Incorrect API key provided: {KEY}"),
        # A 500 is retried by the SDK (twice by default) before the turn fails.
        *[Reply.error(500, "upstream exploded") for _ in range(3)],
        Reply.sse([chunk(content="Fine now."), chunk(finish="stop")]),
    )
    chat = spawn(
        ["chat", "--base-url", sse_server.base_url, "--model", "test-model"], DEEPSEEK_API_KEY=KEY
    )
    chat.send("one\n")
    chat.read_until("\n> ", count=2)
    chat.send("two\n")
    chat.read_until("\n> ", count=3)
    chat.send("three\n")
    chat.read_until("Fine now.\n> ")
    rc, out, err = chat.close()

    assert rc == 0, err  # the last turn of the run succeeded
    assert out == (
        "ready.\n> \n[main turn 1] \n> \n[main turn 2] \n> \n[main turn 3] Fine now.\n> "
    )
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith('dsh: agent "main": turn 1 ') and "failed" in lines[0]
    assert "[redacted]" in lines[0]
    assert lines[1].startswith('dsh: agent "main": turn 2 ') and "upstream exploded" in lines[1]
    assert "Traceback" not in err

    events = events_of(only_log(workdir))
    assert_seqs_contiguous(events)
    reasons = turn_ends(events)
    assert [(r["kind"], r.get("code")) for r in reasons] == [
        ("error", "AUTH"),
        ("error", "SERVER"),
        ("completed", None),
    ]
    assert reasons[0]["message"] == (
        f"{sse_server.base_url}: authentication failed (HTTP 401: Incorrect API key provided: [redacted])"
    )
    assert reasons[1]["message"] == f"{sse_server.base_url}: server error after 3 attempts (HTTP 500: upstream exploded)"

    assert len(sse_server.requests) == 5
    messages = harness_free(sse_server.requests[-1].json["messages"])
    users = [
        m["content"]
        for m in messages
        if m["role"] == "user" and not m["content"].startswith("<context")
    ]
    assert users == ["one", "two", "three"]
    readings = wire_readings(messages)
    assert [(t, s) for t, s, _ in readings] == [(1, 1), (2, 1), (3, 1)]
    assert_in_order(readings)
    assert messages[-1]["content"].startswith(
        '<context source="plugin">Time sampled while preparing turn 3, step 1: '
    )

    assert_key_only_in_auth(sse_server.requests)
    assert_key_nowhere(tmp_path, out, err)


@pytest.mark.slow
def test_ctrl_c_closes_the_stream_and_aborts_the_turn(
    sse_server: SSEServer, spawn: Callable[..., Interactive], workdir: Path, tmp_path: Path
) -> None:
    # A delta every 200 ms for 20 s: only a prompt close can end it early.
    ticks = [chunk(content=f"tick{i} ") for i in range(100)]
    sse_server.push(
        Reply.sse([*ticks, chunk(finish="stop")], delay=0.2),
        Reply.sse([chunk(content="Back again."), chunk(finish="stop")]),
    )
    chat = spawn(
        ["chat", "--base-url", sse_server.base_url, "--model", "test-model"], DEEPSEEK_API_KEY=KEY
    )
    chat.send("go\n")
    chat.read_until("tick0 ")
    interrupted = time.monotonic()
    chat.proc.send_signal(signal.SIGINT)

    closed = sse_server.wait_for_disconnect(0, timeout=10)
    assert closed is not None, "the HTTP stream was never closed"
    assert closed - interrupted < 1.5, f"stream closed {closed - interrupted:.2f}s after Ctrl-C"
    chat.read_until("\n> ", count=2)  # the aborted turn ended and the prompt is back

    chat.send("again\n")
    chat.read_until("Back again.\n> ")
    rc, out, err = chat.close()
    assert rc == 0, err
    assert "Traceback" not in err
    turn1 = out.split("[main turn 2]")[0]
    assert turn1.count("tick") < 20  # it did not run to the end

    events = events_of(only_log(workdir))
    assert_seqs_contiguous(events)
    reasons = turn_ends(events)
    assert [r["kind"] for r in reasons] == ["aborted", "completed"]

    assert len(sse_server.requests) == 2
    messages = harness_free(sse_server.requests[1].json["messages"])
    users = [
        m["content"]
        for m in messages
        if m["role"] == "user" and not m["content"].startswith("<context")
    ]
    assert users == ["go", "again"]
    assert [(t, s) for t, s, _ in wire_readings(messages)] == [(1, 1), (2, 1)]

    assert_key_only_in_auth(sse_server.requests)
    assert_key_nowhere(tmp_path, out, err)


@pytest.mark.slow
def test_missing_api_key_is_a_one_line_usage_error(workdir: Path) -> None:
    # dsh_env drops every DEEPSEEK_* variable of the calling environment.
    result = run_dsh(["chat", "--model", "deepseek-v4-flash"], workdir, stdin="hello\n", **NO_PROXY)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dsh: ")
    assert "an API key is required" in lines[0]
    assert "DEEPSEEK_API_KEY" in lines[0]
    assert session_files(workdir) == []
