"""``PreToolUse`` decisions against the approval policy, through the real ``dsh chat`` (plain
mode: no one can answer an approval question, so anything that asks is refused)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.llm.sse_server import SSEServer
from tests.tools.workspace.cli_support import calls, done

from .hook_support import chat, command_hook, env, events, project, trust

pytestmark = [pytest.mark.slow]


def _decide(decision: str, reason: str) -> str:
    out = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision, "permissionDecisionReason": reason}}
    return f"echo '{json.dumps(out)}'"


def _results(cwd: Path, environ: dict[str, str]) -> list[tuple[str, str, bool]]:
    from tests.apps.conftest import session_files

    [log] = session_files(cwd, Path(environ["DSH_HOME"]) / "sessions")
    lines = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    names = {e["data"]["callId"]: e["data"]["name"] for e in lines if e["type"] == "tool/call"}
    return [
        (names[e["data"]["callId"]], "".join(b.get("text", "") for b in e["data"]["content"]), e["data"]["isError"])
        for e in lines
        if e["type"] == "tool/result"
    ]


def test_allow_counts_as_an_approval_rule(tmp_path: Path) -> None:
    # Unconfined bash asks first (askUnconfinedBash); plain mode cannot answer, so it is refused...
    cwd = project(tmp_path, {"PreToolUse": [command_hook(_decide("allow", "known safe"), "Bash")]})
    environ = env(tmp_path)
    trust(cwd, environ)
    with SSEServer() as server:
        server.push(calls(("bash", {"command": "echo allowed > out.txt", "description": "write"})))
        server.push(done())
        result = chat(cwd, server.base_url, environ, "go\n", "--sandbox", "danger-full-access")
    assert result.returncode == 0, result.stderr
    # ...unless the hook allowed the call: it ran without a question, audited as allowed once.
    assert (cwd / "out.txt").read_text() == "allowed\n"
    log = events(cwd, environ)
    assert [e["data"]["outcome"] for e in log if e["type"] == "approval/decided"] == ["allowed-once"]
    assert [e["data"]["decision"] for e in log if e["type"] == "hook/result"] == ["allow"]


def test_without_the_hook_the_same_call_is_refused(tmp_path: Path) -> None:
    cwd = project(tmp_path, {})
    environ = env(tmp_path)
    with SSEServer() as server:
        server.push(calls(("bash", {"command": "echo allowed > out.txt", "description": "write"})))
        server.push(done())
        result = chat(cwd, server.base_url, environ, "go\n", "--sandbox", "danger-full-access")
    assert result.returncode == 0, result.stderr
    assert not (cwd / "out.txt").exists()
    assert _results(cwd, environ)[0][1].startswith("Error: approval unavailable")


def test_ask_asks_even_for_a_tool_that_needs_no_approval(tmp_path: Path) -> None:
    cwd = project(tmp_path, {"PreToolUse": [command_hook(_decide("ask", "writes need a look"), "Write")]})
    environ = env(tmp_path)
    trust(cwd, environ)
    with SSEServer() as server:
        server.push(calls(("write", {"file_path": "a.txt", "content": "x\n"})))
        server.push(done())
        result = chat(cwd, server.base_url, environ)
    assert result.returncode == 0, result.stderr
    assert not (cwd / "a.txt").exists()  # no one could answer: refused, failing closed
    [(name, text, is_error)] = _results(cwd, environ)
    assert name == "write" and is_error
    assert text == 'Error: approval unavailable: "write" requires approval and no one can answer (no interactive answerer); the call was not run'
    asked = [e["data"] for e in events(cwd, environ) if e["type"] == "approval/asked"]
    assert [(a["toolName"], a["reason"]) for a in asked] == [("write", "writes need a look")]


def test_deny_refuses_with_the_reason(tmp_path: Path) -> None:
    cwd = project(tmp_path, {"PreToolUse": [command_hook(_decide("deny", "no writes on Fridays"), "Write")]})
    environ = env(tmp_path)
    trust(cwd, environ)
    with SSEServer() as server:
        server.push(calls(("write", {"file_path": "a.txt", "content": "x\n"})))
        server.push(done())
        result = chat(cwd, server.base_url, environ)
    assert result.returncode == 0, result.stderr
    assert not (cwd / "a.txt").exists()
    assert _results(cwd, environ) == [("write", "Error: no writes on Fridays", True)]


def test_session_start_notification_and_session_end(tmp_path: Path) -> None:
    cwd = project(
        tmp_path,
        {
            "SessionStart": [command_hook("echo 'Branch: main'", "startup")],
            "Notification": [command_hook("cat > notified.json", "permission_prompt")],
            "SessionEnd": [command_hook("cat > ended.json")],
        },
    )
    environ = env(tmp_path)
    trust(cwd, environ)
    with SSEServer() as server:
        server.push(calls(("bash", {"command": "echo hi", "description": "asks: unconfined"})))
        server.push(done())
        result = chat(cwd, server.base_url, environ, "go\n", "--sandbox", "danger-full-access")
        first = server.requests[0].json["messages"]
    assert result.returncode == 0, result.stderr
    users = [json.dumps(m["content"]) for m in first if m["role"] == "user"]
    start = next(i for i, t in enumerate(users) if "Branch: main" in t)
    assert start < next(i for i, t in enumerate(users) if '"go"' in t or t == '"go"')  # before the prompt
    notified = json.loads((cwd / "notified.json").read_text())
    assert notified["hook_event_name"] == "Notification" and notified["notification_type"] == "permission_prompt"
    assert notified["message"] == "dsh needs your permission to use Bash"
    ended = json.loads((cwd / "ended.json").read_text())
    assert ended["hook_event_name"] == "SessionEnd" and ended["reason"] == "other"
    assert ended["transcript_path"].endswith(".jsonl") and Path(ended["transcript_path"]).exists()
    points = [e["data"]["point"] for e in events(cwd, environ) if e["type"] == "hook/invoked"]
    assert points[0] == "SessionStart" and "Notification" in points and "SessionEnd" not in points


COMPACTING = """\
- id: echo
  name: echo-llm
  config: {delayMs: 0, answer: userText}
- id: compact
  name: compact
  config: {contextWindow: 400, thresholdRatio: 0.5, retainTokens: 40, summarizationModel: '', maxTokens: 64, compactionRetries: 1}
- id: hooks
  name: hooks
- id: app
  name: stdio-app
  config: {model: mock-echo}
"""


def test_precompact_runs_when_a_compaction_starts(tmp_path: Path) -> None:
    from tests.apps.conftest import run_dsh

    cwd = project(tmp_path, {})
    environ = env(tmp_path)
    # A user-level file: the user's own, trusted without asking.
    hooks = {"PreCompact": [command_hook("cat >> precompact.jsonl", "auto")]}
    (Path(environ["DSH_HOME"]) / "settings.json").write_text(json.dumps({"hooks": hooks}))
    (cwd / "c.yml").write_text(COMPACTING)
    for args in (["chat", "--config", "c.yml"], ["chat", "--config", "c.yml", "--continue"]):
        result = run_dsh(args, cwd, stdin="x" * 600 + "\n", **environ)
        assert result.returncode == 0, result.stderr
    [payload] = [json.loads(line) for line in (cwd / "precompact.jsonl").read_text().splitlines()]
    assert payload["hook_event_name"] == "PreCompact" and payload["trigger"] == "auto"
    log = events(cwd, environ)
    assert [e["data"]["point"] for e in log if e["type"] == "hook/invoked"] == ["PreCompact"]
    starts = [e["seq"] for e in log if e["type"] == "compact/start"]
    assert starts and starts[0] < next(e["seq"] for e in log if e["type"] == "hook/invoked")
