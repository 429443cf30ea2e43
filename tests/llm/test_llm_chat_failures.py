"""How ``dsh chat`` ends when the model fails: exit status, the error line, timeouts, resume.

Each test runs the real ``dsh chat`` command in a subprocess against a loopback
chat-completions server (:class:`sse_server.SSEServer`). The rule under test: plain mode exits 1
when the last turn of the run ended in error, 0 otherwise, and the last stderr line names the
endpoint and the cause.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sse_server import Reply, SSEServer, chunk
from tests.apps.conftest import Interactive, run_dsh, session_files

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
FAST = {"retry-after-ms": "5"}  # the SDK's retries wait this long instead of backing off


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    cwd = tmp_path / "project"
    cwd.mkdir()
    return cwd


def chat(
    workdir: Path, base_url: str, *extra: str, stdin: str = "hi\n", model: str = "x"
) -> subprocess.CompletedProcess[str]:
    args = ["chat", "--base-url", base_url, "--model", model, *extra]
    return run_dsh(args, workdir, stdin=stdin, timeout=180, **NO_PROXY)


def last_error(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert lines, "no error line"
    assert "Traceback" not in stderr, stderr
    return lines[-1]


def turn_end_reasons(workdir: Path) -> list[dict[str, object]]:
    [log] = session_files(workdir)
    events = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    return [e["data"]["reason"] for e in events if e["type"] == "turn/end"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.slow
@pytest.mark.parametrize(
    ("replies", "cause"),
    [
        ([Reply.error(401, "bad key")], "authentication failed (HTTP 401: bad key)"),
        ([Reply.error(429, "slow down", headers=FAST)] * 3, "rate limited after 3 attempts (HTTP 429: slow down)"),
        ([Reply.error(500, "boom", headers=FAST)] * 3, "server error after 3 attempts (HTTP 500: boom)"),
        (
            [Reply.error(404, "The model `x` does not exist")],
            "not found (is the model name or the base URL wrong?) (HTTP 404: The model `x` does not exist)",
        ),
        ([Reply.sse([chunk(content="par"), chunk(content="tial", finish="stop")], drop_after=1)],
         "the model stream was cut off before it finished"),
    ],
    ids=["401", "429", "500", "unknown-model", "stream-cut"],
)
def test_a_failed_turn_exits_1_and_names_endpoint_and_cause(
    workdir: Path, sse_server: SSEServer, replies: list[Reply], cause: str
) -> None:
    sse_server.push(*replies)
    result = chat(workdir, sse_server.base_url)
    assert result.returncode == 1, (result.stdout, result.stderr)
    line = last_error(result.stderr)
    assert line.startswith(f'dsh: agent "main": turn 1 step 1 failed: {sse_server.base_url}: {cause}'), line
    assert turn_end_reasons(workdir)[-1]["kind"] == "error"


@pytest.mark.slow
def test_connection_refused_exits_1(workdir: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = chat(workdir, url)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert f"failed: {url}: could not connect after 3 attempts" in last_error(result.stderr)


def test_no_adapter_for_the_model_exits_1(workdir: Path) -> None:
    config = workdir / "dsh.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            - id: echo
              name: echo-llm
            - id: app
              name: stdio-app
              config: {model: nobody-serves-this}
            """
        )
    )
    result = run_dsh(["chat", "--config", str(config)], workdir, stdin="hi\n")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert 'no adapter registered for model "nobody-serves-this"' in last_error(result.stderr)


@pytest.fixture
def spawn(workdir: Path) -> Iterator[Callable[[list[str]], Interactive]]:
    """Start ``dsh`` interactively; anything still running afterwards is killed."""
    started: list[Interactive] = []

    def start(args: list[str]) -> Interactive:
        run = Interactive(args, workdir, **NO_PROXY)
        started.append(run)
        return run

    yield start
    for run in started:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait(timeout=10)
        for pipe in (run.proc.stdin, run.proc.stdout, run.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


@pytest.mark.slow
def test_success_exits_0_and_only_the_last_turn_counts(
    workdir: Path, sse_server: SSEServer, spawn: Callable[[list[str]], Interactive]
) -> None:
    sse_server.push(Reply.sse([chunk(content="fine", finish="stop")]))
    ok = chat(workdir, sse_server.base_url)
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr == ""
    resume = ["chat", "--continue", "--base-url", sse_server.base_url, "--model", "x"]
    # Turn 1 fails, turn 2 (same run) succeeds: the run exits 0.
    sse_server.push(Reply.error(401, "bad key"), Reply.sse([chunk(content="back", finish="stop")]))
    run = spawn(resume)
    run.send("one\n")
    run.read_until("\n> ", count=2, timeout=120)
    run.send("two\n")
    run.read_until("back", timeout=120)
    rc, out, err = run.close(timeout=120)
    assert rc == 0, (out, err)
    assert "authentication failed" in err
    # And the other way round: a success, then a failure, exits 1.
    sse_server.push(Reply.sse([chunk(content="ok", finish="stop")]), Reply.error(401, "bad key"))
    run = spawn(resume)
    run.send("three\n")
    run.read_until("ok", timeout=120)
    run.send("four\n")
    rc, out, err = run.close(timeout=120)
    assert rc == 1, (out, err)


@pytest.mark.slow
def test_a_stalled_stream_ends_the_turn_at_the_timeout(workdir: Path, sse_server: SSEServer) -> None:
    # One chunk, then nothing for far longer than --timeout.
    sse_server.push(Reply.sse([chunk(content="a"), chunk(content="b", finish="stop")], delay=60))
    result = chat(workdir, sse_server.base_url, "--timeout", "0.5")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert last_error(result.stderr).endswith(
        f"failed: {sse_server.base_url}: the model sent nothing for 0.5 s (idle timeout)"
    )
    reason = turn_end_reasons(workdir)[-1]
    assert (reason["kind"], reason.get("code")) == ("error", "TIMEOUT")


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_timeout_must_be_positive(workdir: Path, value: str) -> None:
    result = run_dsh(["chat", "--base-url", "http://127.0.0.1:9/v1", "--timeout", value], workdir, stdin="")
    assert result.returncode == 2
    assert "--timeout must be a positive number of seconds" in last_error(result.stderr)


def test_timeout_without_a_remote_model_is_refused(workdir: Path) -> None:
    result = run_dsh(["chat", "--timeout", "5"], workdir, stdin="")
    assert result.returncode == 2
    assert "--timeout applies to openai-llm and anthropic-llm models" in last_error(result.stderr)


@pytest.mark.slow
def test_resume_keeps_the_recorded_model_and_takes_the_endpoint_from_flags(
    workdir: Path, sse_server: SSEServer
) -> None:
    sse_server.push(Reply.sse([chunk(content="one", finish="stop")]), Reply.sse([chunk(content="two", finish="stop")]))
    first = chat(workdir, sse_server.base_url, model="model-x")
    assert first.returncode == 0, first.stderr
    [log] = session_files(workdir)
    resumed = run_dsh(
        ["chat", "--resume", log.stem, "--base-url", sse_server.base_url], workdir, stdin="again\n", **NO_PROXY
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "two" in resumed.stdout
    assert [r.json["model"] for r in sse_server.requests] == ["model-x", "model-x"]
    headers = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    resume_header = [e for e in headers if e["type"] == "request/header"][-1]["data"]
    assert (resume_header["reason"], resume_header["header"]["config"]["model"]) == ("resume", "model-x")
    # --continue does the same.
    sse_server.push(Reply.sse([chunk(content="three", finish="stop")]))
    cont = run_dsh(["chat", "--continue", "--base-url", sse_server.base_url], workdir, stdin="more\n", **NO_PROXY)
    assert cont.returncode == 0, cont.stderr
    assert sse_server.requests[-1].json["model"] == "model-x"


@pytest.mark.slow
def test_resume_without_an_endpoint_for_the_recorded_model_is_one_line(
    workdir: Path, sse_server: SSEServer
) -> None:
    sse_server.push(Reply.sse([chunk(content="one", finish="stop")]))
    assert chat(workdir, sse_server.base_url, model="model-x").returncode == 0
    [log] = session_files(workdir)
    before = log.read_bytes()
    result = run_dsh(["chat", "--resume", log.stem], workdir, stdin="again\n")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr == (
        f'dsh: session "{log.stem}" last used model "model-x", which nothing here serves: '
        "pass --base-url URL for the endpoint that serves it, or --model NAME to continue with another model\n"
    )
    assert log.read_bytes() == before
    # A composition that does not serve it says so too.
    config = workdir / "echo.yml"
    config.write_text("- id: echo\n  name: echo-llm\n- id: app\n  name: stdio-app\n  config: {model: mock-echo}\n")
    result = run_dsh(["chat", "--config", str(config), "--resume", log.stem], workdir, stdin="again\n")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert 'last used model "model-x", which nothing here serves: add it to the models' in last_error(result.stderr)
    # --model switches explicitly.
    switched = run_dsh(["chat", "--resume", log.stem, "--model", "mock-echo"], workdir, stdin="hi\n")
    assert switched.returncode == 0, switched.stderr
    assert 'You said: "hi"' in switched.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"txt": "hi"}', '$: missing required property "text"'),
        ('{"text": 5}', "$.text: expected string, got integer"),
        ('{"text": "hi"', "not valid JSON (Expecting ',' delimiter: line 1 column 14 (char 13))"),
    ],
    ids=["missing", "wrong-type", "not-json"],
)
def test_bad_tool_arguments_reach_the_model_as_a_clear_error(
    workdir: Path, sse_server: SSEServer, arguments: str, problem: str
) -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "echo", "arguments": arguments}}
    sse_server.push(
        Reply.sse([chunk(tool_calls=[call]), chunk(finish="tool_calls")]),
        Reply.sse([chunk(content="sorry", finish="stop")]),
    )
    result = chat(workdir, sse_server.base_url)
    assert result.returncode == 0, result.stderr
    error = f'Error: invalid arguments for tool "echo": {problem}'
    assert f"[tool result] {error}\n" in result.stdout
    tool_messages = [m for m in sse_server.requests[1].json["messages"] if m["role"] == "tool"]
    assert tool_messages == [{"role": "tool", "tool_call_id": "call_1", "content": error}]
