"""``dsh run``: one turn for scripts. Output formats, exit codes per failure class, --continue.

Every test runs the real command in a subprocess; the model is the keyless mock-echo or a
loopback chat-completions server (:class:`sse_server.SSEServer`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sse_server import Reply, SSEServer, chunk
from tests.apps.conftest import dsh_env, run_dsh, session_files

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
FAST = {"retry-after-ms": "5"}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    cwd = tmp_path / "project"
    cwd.mkdir()
    return cwd


def log_lines(workdir: Path) -> list[str]:
    [log] = session_files(workdir)
    return log.read_text().splitlines()


@pytest.mark.slow
def test_text_prints_the_final_reply_and_exits_0(workdir: Path) -> None:
    result = run_dsh(["run", "echo hello"], workdir)
    assert result.returncode == 0, result.stderr
    # The last assistant message of the turn, after the tool round trip.
    assert result.stdout == "The echo tool has spoken.\n"
    assert result.stderr == ""


def test_prompt_from_stdin(workdir: Path) -> None:
    result = run_dsh(["run", "-"], workdir, stdin="from a pipe\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('You said: "from a pipe".')


def test_json_is_one_object_with_text_session_reason_usage_model(workdir: Path) -> None:
    result = run_dsh(["run", "hi", "--output-format", "json"], workdir)
    assert result.returncode == 0, result.stderr
    obj = json.loads(result.stdout)
    [log] = session_files(workdir)
    assert obj["sessionId"] == log.stem
    assert obj["reason"] == {"kind": "completed"}
    assert obj["text"].startswith('You said: "hi".')
    assert obj["model"] == "mock-echo" and obj["turn"] == 1
    assert obj["usage"]["inputTokens"] > 0 and obj["usage"]["outputTokens"] > 0


@pytest.mark.slow
def test_stream_json_is_the_durable_log_line_for_line(workdir: Path) -> None:
    result = run_dsh(["run", "echo hi", "--output-format", "stream-json"], workdir)
    assert result.returncode == 0, result.stderr
    # Exactly the event lines that reached the log, in order, byte for byte.
    assert result.stdout.splitlines() == log_lines(workdir)[1:]
    types = [json.loads(line)["type"] for line in result.stdout.splitlines()]
    assert types[0] == "turn/start" and types[-1] == "turn/end" and "tool/call" in types


@pytest.mark.slow
def test_continue_and_resume_by_prefix(workdir: Path) -> None:
    first = json.loads(run_dsh(["run", "one", "--output-format", "json"], workdir).stdout)
    second = json.loads(run_dsh(["run", "--continue", "two", "--output-format", "json"], workdir).stdout)
    assert second["sessionId"] == first["sessionId"] and second["turn"] == 2
    prefix = first["sessionId"].removeprefix("main-session-")[:8]
    third = run_dsh(["run", "--resume", prefix, "three", "--output-format", "json"], workdir)
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["turn"] == 3
    assert len(session_files(workdir)) == 1


@pytest.mark.slow
def test_system_replaces_the_default_prompt(workdir: Path) -> None:
    assert run_dsh(["run", "hi", "--system", "You are terse."], workdir).returncode == 0
    header = next(json.loads(line) for line in log_lines(workdir)[1:] if '"request/header"' in line)
    assert header["data"]["header"]["system"] == "You are terse."
    (workdir / "prompt.txt").write_text("From a file.")
    assert run_dsh(["run", "--continue", "again", "--system-file", "prompt.txt"], workdir).returncode == 0
    headers = [json.loads(line) for line in log_lines(workdir)[1:] if '"request/header"' in line]
    assert headers[-1]["data"]["header"]["system"] == "From a file."


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "stdin", "code", "text"),
    [
        (["run", ""], "", 2, "the prompt is empty"),
        (["run", "-"], "  \n", 2, "the prompt is empty"),
        (["run", "hi", "--output-format", "yaml"], "", 2, "invalid choice"),
        (["run", "hi", "--continue", "--resume", "x"], "", 2, "not allowed with"),
        (["run", "hi", "--system-file", "missing.txt"], "", 2, "cannot read --system-file missing.txt"),
        (["run", "hi", "--resume", "no-such-session"], "", 1, 'session "no-such-session" not found'),
        (["run", "hi", "--continue"], "", 1, "no stored session for this folder"),
    ],
    ids=["empty", "empty-stdin", "format", "resume-and-continue", "system-file", "unknown-session", "nothing-to-continue"],
)
def test_usage_and_store_failures(workdir: Path, args: list[str], stdin: str, code: int, text: str) -> None:
    result = run_dsh(args, workdir, stdin=stdin)
    assert result.returncode == code, result.stderr
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("dsh: ") and text in line, line


@pytest.mark.slow
@pytest.mark.parametrize(
    ("replies", "cause"),
    [
        ([Reply.error(401, "bad key")], "authentication failed (HTTP 401: bad key)"),
        ([Reply.error(500, "boom", headers=FAST)] * 3, "server error after 3 attempts (HTTP 500: boom)"),
        ([Reply.sse([chunk(content="par"), chunk(content="tial", finish="stop")], drop_after=1)],
         "the model stream was cut off before it finished"),
    ],
    ids=["401", "500", "stream-cut"],
)
def test_a_failed_turn_exits_1(workdir: Path, sse_server: SSEServer, replies: list[Reply], cause: str) -> None:
    sse_server.push(*replies)
    result = run_dsh(["run", "hi", "--base-url", sse_server.base_url, "--model", "x", "--output-format", "json"],
                     workdir, **NO_PROXY)
    assert result.returncode == 1, result.stderr
    obj = json.loads(result.stdout)
    assert obj["reason"]["kind"] == "error"
    assert cause in result.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_good_remote_turn_exits_0_with_its_usage(workdir: Path, sse_server: SSEServer) -> None:
    usage = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    sse_server.push(Reply.sse([chunk(content="fine"), chunk(finish="stop", usage=usage)]))
    result = run_dsh(["run", "hi", "--base-url", sse_server.base_url, "--model", "x", "--output-format", "json"],
                     workdir, **NO_PROXY)
    assert result.returncode == 0, result.stderr
    obj = json.loads(result.stdout)
    assert obj["text"] == "fine" and obj["model"] == "x"
    assert obj["usage"]["outputTokens"] == 3


@pytest.mark.slow
def test_connection_refused_exits_1(workdir: Path) -> None:
    result = run_dsh(["run", "hi", "--base-url", "http://127.0.0.1:9/v1", "--model", "x"], workdir, **NO_PROXY)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "failed" in result.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_sigterm_cancels_the_turn_and_exits_130(workdir: Path) -> None:
    (workdir / "slow.yml").write_text(
        "- id: echo\n  name: echo-llm\n  config: {delayMs: 200, answer: userText}\n"
        "- id: app\n  name: stdio-app\n  config: {model: mock-echo}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsh", "run", "a prompt long enough to be slow", "--config", "slow.yml",
         "--output-format", "stream-json"],
        cwd=workdir, env=dsh_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until the reply streams
        if '"text-delta"' in line:
            break
    proc.send_signal(signal.SIGTERM)
    rest = proc.stdout.read()
    assert proc.wait(timeout=30) == 130
    last = json.loads(rest.splitlines()[-1])
    assert last["type"] == "turn/end" and last["data"]["reason"]["kind"] == "aborted"
    # The cancelled turn is durable: the log ends with the same turn/end.
    assert json.loads(log_lines(workdir)[-1]) == last
