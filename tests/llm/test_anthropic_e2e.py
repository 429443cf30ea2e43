"""``dsh chat``/``dsh run --model anthropic:…`` against a scripted Messages API server on loopback.

Each test runs the real CLI in a subprocess; the real ``anthropic`` SDK talks to
:mod:`anthropic_server` through ``ANTHROPIC_BASE_URL``. Checked: a two-step tool loop with
thinking sends the first step's thinking block and signature back byte for byte, the cache
breakpoints sit where the llm README's rule says, cache tokens are logged and shown, and
``dsh sessions requests --json`` rebuilds each request exactly as the server received it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from anthropic_server import error, redacted, reply, text, thinking, tool_use
from sse_server import Reply, SSEServer
from tests.apps.conftest import default_root, dsh_env, run_dsh, session_files
from tests.tools.workspace.ws_support import needs_bwrap

KEY = "sk-ant-e2e-SECRET"
NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
MODEL = "anthropic:claude-sonnet-4-5"
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/=="
CACHE = {"type": "ephemeral"}
FAST = {"retry-after-ms": "5"}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    cwd = tmp_path / "project"
    cwd.mkdir()
    return cwd


def env(server: SSEServer, **extra: str) -> dict[str, str]:
    return {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": server.base_url, **NO_PROXY, **extra}


def events_of(cwd: Path) -> list[dict[str, Any]]:
    [log] = session_files(cwd)
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


def tool_loop(server: SSEServer) -> None:
    server.push(
        reply(
            [thinking("The user wants an echo. I should call the tool.", SIGNATURE),
             text("Let me ", "echo that."),
             tool_use("toolu_01", "echo", '{"text": "hi"}')],
            stop="tool_use",
            usage={"input_tokens": 30, "cache_creation_input_tokens": 1200},
        ),
        reply(
            [thinking("It worked.", "sig-two"), redacted("REDACTED-BLOB"), text("Done: ECHO: HI.")],
            usage={"input_tokens": 40, "cache_read_input_tokens": 1200, "cache_creation_input_tokens": 60},
        ),
    )


def marks(body: dict[str, Any]) -> list[str]:
    """Where ``cache_control`` sits in a received request body."""
    found = [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    found += [f"system[{i}]" for i, s in enumerate(body.get("system", [])) if "cache_control" in s]
    for m, message in enumerate(body["messages"]):
        for b, block in enumerate(message["content"]):
            if "cache_control" in block:
                assert block["cache_control"] == CACHE
                found.append(f"messages[{m}].content[{b}]")
    return found


@pytest.mark.slow
def test_tool_loop_with_thinking_signatures_cache_and_rebuilt_requests(
    sse_server: SSEServer, workdir: Path
) -> None:
    tool_loop(sse_server)
    result = run_dsh(["chat", "--model", MODEL], workdir, stdin="echo hi\n", timeout=120, **env(sse_server))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert '[tool call] echo({"text": "hi"})' in result.stdout
    assert "Done: ECHO: HI." in result.stdout

    first, second = (r.json for r in sse_server.requests)
    assert [r.path for r in sse_server.requests] == ["/v1/messages"] * 2
    for r in sse_server.requests:  # the SDK's own header (x-api-key or a bearer token)
        assert KEY in (r.headers.get("x-api-key"), r.headers.get("authorization", "").removeprefix("Bearer "))
        assert KEY.encode() not in r.body
    assert first["model"] == second["model"] == "claude-sonnet-4-5"  # the provider prefix is dsh's
    assert first["stream"] is True
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert first["max_tokens"] == 64000  # the catalog's maximum output for the model

    # The second request carries step 1's thinking block and signature, unchanged, first.
    assistant = second["messages"][-2]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "The user wants an echo. I should call the tool.",
        "signature": SIGNATURE,
    }
    assert assistant["content"][2] == {"type": "tool_use", "id": "toolu_01", "name": "echo", "input": {"text": "hi"}}
    results = second["messages"][-1]["content"]
    assert results[0]["type"] == "tool_result" and results[0]["tool_use_id"] == "toolu_01"

    # The cache rule: last tool, system, end of the previous request, end of this request.
    last_tool = len(first["tools"]) - 1
    assert marks(first) == [f"tools[{last_tool}]", "system[0]", f"messages[0].content[{len(first['messages'][0]['content']) - 1}]"]
    prev_end = f"messages[0].content[{len(second['messages'][0]['content']) - 1}]"
    final = f"messages[2].content[{len(second['messages'][2]['content']) - 1}]"
    assert marks(second) == [f"tools[{last_tool}]", "system[0]", prev_end, final]
    assert len(second["messages"]) == 3
    # The previous request is the prefix of this one, mark included: what it wrote is read now.
    assert second["messages"][0] == first["messages"][0]

    # The log keeps the thinking text, its signature and the redacted block.
    events = events_of(workdir)
    messages = [e["data"] for e in events if e["type"] == "assistant/message"]
    assert messages[0]["content"][0] == {
        "type": "reasoning", "text": "The user wants an echo. I should call the tool.", "signature": SIGNATURE,
    }
    assert {"type": "reasoning", "text": "", "signature": "REDACTED-BLOB", "redacted": True} in messages[1]["content"]
    assert messages[0]["usage"] == {"inputTokens": 30, "outputTokens": 9, "cacheWriteTokens": 1200}
    assert messages[1]["usage"] == {"inputTokens": 40, "outputTokens": 9, "cacheReadTokens": 1200, "cacheWriteTokens": 60}

    # `dsh sessions requests --json` rebuilds what the server received, marks included.
    session_id = session_files(workdir)[0].stem
    rebuilt = run_dsh(["sessions", "requests", session_id, "--json"], workdir)
    assert rebuilt.returncode == 0, rebuilt.stderr
    wires = [r["wire"] for r in json.loads(rebuilt.stdout)]
    for wire, body in zip(wires, (first, second), strict=True):
        assert wire == {k: body[k] for k in ("tools", "system", "messages")}
    shown = run_dsh(["sessions", "requests", session_id, "--step", "1.2"], workdir)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("⚑ cache") == 4, shown.stdout
    assert "[system] " in shown.stdout and "⚑ cache" in shown.stdout.split("[system] ")[1].splitlines()[0]
    # The session transcript shows the cache hits from the logged usage.
    show = run_dsh(["sessions", "show", session_id], workdir)
    # Turn 1: 30 + 40 uncached, 1200 read, 1200 + 60 written: 1200 of 2530.
    assert "tokens in/out 70/18 · cache hits 1200 (47% of input)" in show.stdout, show.stdout


@pytest.mark.slow
def test_run_json_reports_cache_tokens_and_a_redacted_block_survives_resume(
    sse_server: SSEServer, workdir: Path
) -> None:
    sse_server.push(
        reply([redacted("OPAQUE"), text("first")], usage={"cache_read_input_tokens": 500}),
        reply([text("second")]),
    )
    one = run_dsh(["run", "hi", "--model", MODEL, "--output-format", "json"], workdir, **env(sse_server))
    assert one.returncode == 0, one.stderr
    result = json.loads(one.stdout)
    assert result["model"] == MODEL
    assert result["usage"] == {"inputTokens": 10, "outputTokens": 9, "cacheReadTokens": 500}
    # A new process continues the session (with the model the log recorded) and sends the
    # redacted block back as the API requires.
    two = run_dsh(["run", "--continue", "again"], workdir, **env(sse_server))
    assert two.returncode == 0, two.stderr
    assert two.stdout == "second\n"
    body = sse_server.requests[1].json
    assert body["messages"][1]["content"][0] == {"type": "redacted_thinking", "data": "OPAQUE"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("replies", "cause"),
    [
        ([error(401, "authentication_error", "invalid x-api-key")], "authentication failed (HTTP 401: invalid x-api-key)"),
        ([error(429, "rate_limit_error", "slow down", headers=FAST)] * 3,
         "rate limited after 3 attempts (HTTP 429: slow down)"),
        ([error(529, "overloaded_error", "Overloaded", headers=FAST)] * 3,
         "overloaded after 3 attempts (HTTP 529: Overloaded)"),
        ([reply([text("par", "tial")], drop_after=4)], "the model stream was cut off before it finished"),
        ([reply([text("slow")], delay=5)], "the model sent nothing for 1 s (idle timeout)"),
        ([Reply.hanging(10)] * 3, "no response within 1 s after 3 attempts (timeout)"),
    ],
    ids=["401", "429", "529", "stream-cut", "idle-timeout", "no-response"],
)
def test_a_failed_turn_exits_1_with_one_line_naming_endpoint_and_cause(
    sse_server: SSEServer, workdir: Path, replies: list[Reply], cause: str
) -> None:
    sse_server.push(*replies)
    result = run_dsh(["chat", "--model", MODEL, "--timeout", "1"], workdir, stdin="hi\n", timeout=120, **env(sse_server))
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f'dsh: agent "main": turn 1 step 1 failed: {sse_server.base_url}: {cause}'), line
    assert KEY not in result.stderr
    kinds = [e["data"]["reason"]["kind"] for e in events_of(workdir) if e["type"] == "turn/end"]
    assert kinds == ["error"]


def test_retry_after_is_honoured_before_the_retry(sse_server: SSEServer, workdir: Path) -> None:
    sse_server.push(error(429, "rate_limit_error", "slow down", headers={"retry-after": "0"}), reply([text("ok")]))
    result = run_dsh(["run", "hi", "--model", MODEL], workdir, **env(sse_server))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
    assert len(sse_server.requests) == 2


def test_max_tokens_stop_ends_the_turn_max_tokens_and_exits_1(sse_server: SSEServer, workdir: Path) -> None:
    sse_server.push(reply([text("cut sh")], stop="max_tokens"))
    result = run_dsh(["run", "hi", "--model", MODEL], workdir, **env(sse_server))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith('dsh: turn ended "max-tokens"')


@pytest.mark.slow
def test_sigterm_during_the_stream_closes_it_and_the_turn_ends_aborted(sse_server: SSEServer, workdir: Path) -> None:
    sse_server.push(reply([text(*["word "] * 200)], delay=0.1))
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsh", "run", "hi", "--model", MODEL, "--output-format", "stream-json"],
        cwd=workdir, env=dsh_env(**env(sse_server)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
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
    assert sse_server.wait_for_disconnect(0, timeout=10) is not None  # the HTTP stream was closed


@pytest.mark.attack
def test_the_api_key_never_leaves_the_request_even_when_the_server_echoes_it(
    sse_server: SSEServer, workdir: Path
) -> None:
    sse_server.push(error(401, "authentication_error", f"invalid x-api-key {KEY}"))
    result = run_dsh(["--debug", "run", "hi", "--model", MODEL], workdir, **env(sse_server))
    assert result.returncode == 1
    assert KEY in json.dumps(dict(sse_server.requests[0].headers))  # it was sent (not vacuous)
    assert KEY not in result.stdout + result.stderr
    assert "invalid x-api-key [redacted]" in result.stderr
    for path in (p for base in (workdir, default_root()) for p in base.rglob("*") if p.is_file()):
        assert KEY.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(
    ("events", "cause"),
    [
        (['event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'],
         "the model reported an error: Overloaded"),
        (["event: message_start\ndata: {not json\n\n"], "malformed"),
    ],
    ids=["overloaded-event", "bad-json"],
)
@pytest.mark.attack
def test_a_hostile_or_failing_stream_is_one_line_and_exit_1(
    sse_server: SSEServer, workdir: Path, events: list[str], cause: str
) -> None:
    start = reply([text("partial")]).events[:3]  # message_start, ping, content_block_start
    sse_server.push(Reply(kind="sse", events=[*start, *(e.encode() for e in events)], done=False))
    result = run_dsh(["run", "hi", "--model", MODEL], workdir, **env(sse_server))
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f'dsh: agent "main": turn 1 step 1 failed: {sse_server.base_url}: ') and cause in line, line


@pytest.mark.attack
@needs_bwrap  # the workspace-write sandbox bash runs in without asking
def test_a_custom_key_variable_never_reaches_the_shell_environment(sse_server: SSEServer, workdir: Path) -> None:
    """``apiKeyEnv: MY_CLAUDE`` (a name no secret pattern matches): ``anthropic-llm`` registers
    it, so ``env`` run by the model shows neither the variable nor its value."""
    secret = "sk-ant-custom-SECRET-7777"
    sse_server.push(
        reply([tool_use("toolu_1", "bash", json.dumps({"command": "env", "description": "show env"}))], stop="tool_use"),
        reply([text("done.")]),
    )
    config = workdir.parent / "dsh.yaml"
    config.write_text(
        "- {id: llm, name: anthropic-llm, config: {models: [claude-test], baseURL: '"
        + sse_server.base_url + "', apiKeyEnv: MY_CLAUDE}}\n"
        "- {id: ws, name: workspace-tools}\n"
        "- {id: app, name: stdio-app, config: {model: claude-test}}\n"
    )
    result = run_dsh(["run", "go", "--config", str(config)], workdir, MY_CLAUDE=secret, PLAIN_SETTING="plain-6666", **NO_PROXY)
    assert result.returncode == 0, result.stderr
    assert KEY not in json.dumps(dict(sse_server.requests[0].headers))
    assert secret in json.dumps(dict(sse_server.requests[0].headers))  # the key was read from MY_CLAUDE
    [shown] = [b for b in sse_server.requests[1].json["messages"][-1]["content"] if b["type"] == "tool_result"]
    output = json.dumps(shown["content"])
    assert "PLAIN_SETTING=plain-6666" in output, output  # the command did print its environment
    assert "MY_CLAUDE" not in output and secret not in output, output
    assert secret not in "\n".join(p.read_text() for p in session_files(workdir))
