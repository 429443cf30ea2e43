"""Depth cap, parallel children, and a project agent definition's tool filter, through the real
``dsh chat`` against a scripted loopback model."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from tests.apps.conftest import run_dsh
from tests.llm.sse_server import Reply
from tests.plugins.subagent.support import (
    CHILD_MARK,
    NO_PROXY,
    RoutedServer,
    call_reply,
    first_user_text,
    split,
    stored_sessions,
    system_of,
    text_reply,
    tool_messages,
)

pytestmark = pytest.mark.slow


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), **NO_PROXY}


def _chat(cwd: Path, server: RoutedServer, tmp_path: Path, prompt: str) -> Any:
    return run_dsh(
        ["chat", "--base-url", server.base_url, "--model", "m", "--sandbox", "danger-full-access"],
        cwd, stdin=prompt + "\n", timeout=120, **_env(tmp_path),
    )


def depth_route(body: dict[str, Any]) -> Reply:
    tools = tool_messages(body)
    if CHILD_MARK in system_of(body):
        level = int(re.search(r"level (\d+)", first_user_text(body)).group(1))  # type: ignore[union-attr]
    else:
        level = 0
    if not tools:
        return call_reply([(f"call-{level}", "subagent", {"description": "go deeper", "prompt": f"level {level + 1}"})])
    return text_reply(f"level {level} saw: {tools[-1]['content']}")


def test_a_child_at_depth_3_is_refused_further_delegation(tmp_path: Path) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    with RoutedServer(depth_route) as server:
        result = _chat(cwd, server, tmp_path, "start")
    assert result.returncode == 0, result.stderr
    sessions = stored_sessions(cwd)
    parents, children = split(sessions)
    assert len(parents) == 1 and len(children) == 3
    depths = {sid: sessions[sid][1][0]["data"]["delegationDepth"] for sid in children}
    assert sorted(depths.values()) == [1, 2, 3]
    deepest = next(sid for sid, d in depths.items() if d == 3)
    refused = next(e for e in sessions[deepest][1] if e["type"] == "tool/result")
    assert refused["data"]["content"] == [{"type": "text", "text": "Error: subagent depth 4 exceeds maxDepth 3"}]
    assert refused["data"]["isError"] is True
    # The refusal travelled back up as each level's final text.
    assert "level 0 saw: level 1 saw: level 2 saw: level 3 saw: Error: subagent depth 4 exceeds maxDepth 3" in result.stdout


def parallel_route(body: dict[str, Any]) -> Reply:
    if CHILD_MARK in system_of(body):
        # Slow enough that sequential children could never overlap.
        return text_reply(f"answer for {first_user_text(body)}", first_delay=1.5)
    if not tool_messages(body):
        return call_reply([
            ("p-a", "subagent", {"description": "task a", "prompt": "task A"}),
            ("p-b", "subagent", {"description": "task b", "prompt": "task B"}),
        ])
    return text_reply("both done")


def test_two_subagent_calls_in_one_message_run_at_once(tmp_path: Path) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    with RoutedServer(parallel_route) as server:
        result = _chat(cwd, server, tmp_path, "do both")
        child_requests = [r for r in server.requests if CHILD_MARK in system_of(r.json)]
    assert result.returncode == 0, result.stderr
    assert len(child_requests) == 2
    # The second child asked before the first one got any answer: both were in flight at once.
    first, second = sorted(r.received_at for r in child_requests)
    assert second - first < 1.5
    sessions = stored_sessions(cwd)
    parents, _ = split(sessions)
    results = [e for e in sessions[parents[0]][1] if e["type"] == "tool/result"]
    # Committed in the model's order, each with its own child's text.
    assert [e["data"]["callId"] for e in results] == ["p-a", "p-b"]
    assert [e["data"]["content"][0]["text"] for e in results] == ["answer for task A", "answer for task B"]


REVIEWER = """---
name: reviewer
description: Reviews code for bugs
tools: [read, grep]
---
You are a subagent reviewer. Review the code you are pointed at.
"""


def reviewer_route(body: dict[str, Any]) -> Reply:
    tools = tool_messages(body)
    system = system_of(body)
    if "subagent reviewer" in system:
        if not tools:
            return call_reply([("r-bash", "bash", {"command": "echo pwned > pwned.txt", "description": "try"})])
        return text_reply(f"reviewer got: {tools[-1]['content']}")
    if not tools:
        return call_reply([("p-rev", "subagent", {"description": "review", "prompt": "review x.py", "subagent_type": "reviewer"})])
    return text_reply("reviewed")


def test_a_trusted_project_reviewer_cannot_call_bash(tmp_path: Path) -> None:
    cwd = tmp_path / "project"
    (cwd / ".claude" / "agents").mkdir(parents=True)
    (cwd / ".claude" / "agents" / "reviewer.md").write_text(REVIEWER)
    env = _env(tmp_path)
    trusted = run_dsh(["trust", "--yes"], cwd, **env)
    assert trusted.returncode == 0, trusted.stderr
    assert 'subagent "reviewer": tools=read,grep model=inherit' in trusted.stdout
    with RoutedServer(reviewer_route) as server:
        result = _chat(cwd, server, tmp_path, "review please")
        bodies = server.bodies()
    assert result.returncode == 0, result.stderr
    parent_tools = next(b for b in bodies if CHILD_MARK not in system_of(b) and "reviewer" not in system_of(b))["tools"]
    subagent = next(t for t in parent_tools if t["function"]["name"] == "subagent")["function"]
    assert "- reviewer: Reviews code for bugs" in subagent["description"]
    child = [b for b in bodies if "subagent reviewer" in system_of(b)]
    assert {t["function"]["name"] for t in child[0]["tools"]} == {"read", "grep"}
    assert [m["content"] for m in tool_messages(child[-1])] == ['Error: unknown tool "bash"']
    assert not (cwd / "pwned.txt").exists()


def test_an_untrusted_project_agent_file_is_not_offered(tmp_path: Path) -> None:
    cwd = tmp_path / "project"
    (cwd / ".dsh" / "agents").mkdir(parents=True)
    (cwd / ".dsh" / "agents" / "reviewer.md").write_text(REVIEWER)
    with RoutedServer(lambda body: text_reply("hi")) as server:
        result = _chat(cwd, server, tmp_path, "hello")
        body = server.bodies()[0]
    assert result.returncode == 0, result.stderr
    assert "reviewer.md is not trusted (new); it would run: tools=read,grep model=inherit" in result.stderr
    subagent = next(t for t in body["tools"] if t["function"]["name"] == "subagent")["function"]
    assert "reviewer" not in subagent["description"]
    assert "subagent_type" not in subagent["parameters"]["properties"]
