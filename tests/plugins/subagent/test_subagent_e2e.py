"""The real ``dsh chat`` (default composition) against a scripted loopback model: the parent
delegates, the child works in its own durable session, and both sessions load, export and
rebuild their requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.apps.conftest import run_dsh
from tests.llm.sse_server import Reply, chunk
from tests.plugins.subagent.support import (
    CHILD_MARK,
    NO_PROXY,
    RoutedServer,
    call_reply,
    split,
    stored_sessions,
    system_of,
    text_reply,
    tool_messages,
)

pytestmark = pytest.mark.slow

CHILD_ANSWER = "notes.txt holds: the launch code is 7421"


def _project(tmp_path: Path) -> Path:
    cwd = tmp_path / "project"
    (cwd / "docs").mkdir(parents=True)
    (cwd / "docs" / "notes.txt").write_text("the launch code is 7421\n")
    return cwd


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), **NO_PROXY}


def delegate_route(body: dict[str, Any]) -> Reply:
    done = len(tool_messages(body))
    if CHILD_MARK in system_of(body):
        if done == 0:
            return call_reply([("c-glob", "glob", {"pattern": "**/*.txt"})])
        if done == 1:
            return call_reply([("c-read", "read", {"file_path": "docs/notes.txt"})])
        return text_reply(CHILD_ANSWER)
    if done == 0:
        return call_reply([("p-sub", "subagent", {"description": "find the notes", "prompt": "Find the notes file and tell me what it says."})])
    return text_reply("The subagent found it.")


def test_parent_delegates_a_file_search_to_a_child_session(tmp_path: Path) -> None:
    cwd = _project(tmp_path)
    with RoutedServer(delegate_route) as server:
        result = run_dsh(
            ["chat", "--base-url", server.base_url, "--model", "m", "--sandbox", "danger-full-access"],
            cwd, stdin="where are the notes?\n", timeout=90, **_env(tmp_path),
        )
        bodies = server.bodies()
    assert result.returncode == 0, result.stderr
    assert "The subagent found it." in result.stdout
    sessions = stored_sessions(cwd)
    parents, children = split(sessions)
    assert len(parents) == 1 and len(children) == 1
    parent_id, child_id = parents[0], children[0]
    child_header, child_events = sessions[child_id]
    _, parent_events = sessions[parent_id]
    # The link: header and first event.
    assert child_header["parentSession"] == parent_id
    link = child_events[0]
    assert link["type"] == "subagent/link"
    assert link["data"]["parentSession"] == parent_id
    assert link["data"]["parentCallId"] == "p-sub"
    assert link["data"]["delegationDepth"] == 1
    # The parent's result is exactly the child's final text, and names the child session.
    result_event = next(e for e in parent_events if e["type"] == "tool/result" and e["data"]["callId"] == "p-sub")
    assert result_event["data"]["content"] == [{"type": "text", "text": CHILD_ANSWER}]
    assert result_event["data"]["isError"] is False
    assert result_event["data"]["meta"]["childSessionId"] == child_id
    # The child ran glob and read in its own session, with its own time readings.
    child_calls = [e["data"]["name"] for e in child_events if e["type"] == "tool/call"]
    assert child_calls == ["glob", "read"]
    read_result = [e for e in child_events if e["type"] == "tool/result"][1]
    assert "7421" in json.dumps(read_result["data"]["content"])
    readings = [e for e in child_events if e["type"] == "context/message" and (e["data"].get("source") or {}).get("plugin") == "time-context"]
    assert len(readings) == 3  # one per child step
    assert not any(e["type"] == "tool/call" and e["data"]["name"] in ("glob", "read") for e in parent_events)
    # Child requests carried the child's own system prompt and no schedule tools.
    child_bodies = [b for b in bodies if CHILD_MARK in system_of(b)]
    assert len(child_bodies) == 3
    names = {t["function"]["name"] for t in child_bodies[0]["tools"]}
    assert {"glob", "read", "subagent"} <= names and "schedule_create" not in names
    # Both sessions load, export and rebuild their requests through the CLI.
    env = _env(tmp_path)
    for sid, steps in ((parent_id, 2), (child_id, 3)):
        shown = run_dsh(["sessions", "show", sid], cwd, **env)
        assert shown.returncode == 0, shown.stderr
        exported = run_dsh(["sessions", "export", sid], cwd, **env)
        assert exported.returncode == 0 and exported.stdout.splitlines()[0].startswith('{"type":"session"')
        requests = run_dsh(["sessions", "requests", sid, "--json"], cwd, **env)
        assert requests.returncode == 0, requests.stderr
        assert len(json.loads(requests.stdout)) == steps
    rebuilt = json.loads(run_dsh(["sessions", "requests", child_id, "--json"], cwd, **env).stdout)
    assert rebuilt[0]["system"].startswith(CHILD_MARK)
    # Seeing it: the child under its parent, the links both ways, the whole tree.
    listed = run_dsh(["sessions", "list"], cwd, **env).stdout.splitlines()
    ids = [line.split()[0] if not line.startswith("└") else "└ " + line.split()[1] for line in listed[1:] if line.strip()]
    assert ids[:2] == [parent_id, "└ " + child_id]
    shown_parent = run_dsh(["sessions", "show", parent_id], cwd, **env).stdout
    assert f"subagent session {child_id}  general-purpose: find the notes (call p-sub, depth 1)" in shown_parent
    shown_child = run_dsh(["sessions", "show", child_id], cwd, **env).stdout
    assert f"delegated by session {parent_id} (call p-sub, depth 1)" in shown_child
    tree = run_dsh(["sessions", "show", child_id, "--tree"], cwd, **env).stdout.splitlines()
    assert tree == [parent_id, f"└─ {child_id}  general-purpose: find the notes (call p-sub, depth 1) (this session)"]


def failing_route(body: dict[str, Any]) -> Reply:
    done = len(tool_messages(body))
    if CHILD_MARK in system_of(body):
        if done == 0:
            return call_reply_with_text("partial progress", "c-glob", "glob", {"pattern": "*"})
        return Reply.error(400, "the child's model broke")
    if done == 0:
        return call_reply([("p-sub", "subagent", {"description": "fail", "prompt": "try"})])
    return text_reply("parent saw the failure")


def call_reply_with_text(text: str, call_id: str, name: str, args: dict[str, Any]) -> Reply:
    return Reply.sse([
        chunk(content=text),
        chunk(tool_calls=[{"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]),
        chunk(finish="tool_calls"),
    ])


def test_a_failed_child_is_an_error_that_keeps_its_partial_text(tmp_path: Path) -> None:
    cwd = _project(tmp_path)
    with RoutedServer(failing_route) as server:
        result = run_dsh(["chat", "--base-url", server.base_url, "--model", "m"], cwd, stdin="go\n", timeout=90,
                         **_env(tmp_path))
    assert result.returncode == 0, result.stderr
    sessions = stored_sessions(cwd)
    parents, children = split(sessions)
    result_event = next(e for e in sessions[parents[0]][1] if e["type"] == "tool/result")
    assert result_event["data"]["content"] == [{"type": "text", "text": "Error: subagent run failed\n\npartial progress"}]
    assert result_event["data"]["isError"] is True
    ends = [e["data"]["reason"]["kind"] for e in sessions[children[0]][1] if e["type"] == "turn/end"]
    assert ends == ["error"]
