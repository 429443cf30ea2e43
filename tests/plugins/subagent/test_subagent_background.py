"""``run_in_background: true``: the start returns ``started background subagent task <id>``
and the child's final text is collected with ``job_output`` (listed by ``job_list``)."""

from __future__ import annotations

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
    split,
    stored_sessions,
    system_of,
    text_reply,
    tool_messages,
)

pytestmark = pytest.mark.slow


def _route(body: dict[str, Any]) -> Reply:
    if CHILD_MARK in system_of(body):
        return text_reply("background answer", first_delay=0.5)
    done = tool_messages(body)
    if not done:
        return call_reply([("p-bg", "subagent", {"description": "bg task", "prompt": "work", "run_in_background": True})])
    if len(done) == 1:
        return call_reply([("p-list", "job_list", {})])
    if len(done) == 2:
        return call_reply([("p-out", "job_output", {"job_id": "subagent-1", "wait": True})])
    return text_reply("collected")


def test_a_background_child_is_collected_with_job_output(tmp_path: Path) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    with RoutedServer(_route) as server:
        result = run_dsh(["chat", "--base-url", server.base_url, "--model", "m"], cwd, stdin="go\n", timeout=60,
                         HOME=str(tmp_path), **NO_PROXY)
    assert result.returncode == 0, result.stderr
    sessions = stored_sessions(cwd)
    parents, children = split(sessions)
    assert len(children) == 1
    results = {e["data"]["callId"]: e["data"]["content"][0]["text"] for e in sessions[parents[0]][1] if e["type"] == "tool/result"}
    assert results["p-bg"] == "started background subagent task subagent-1"
    assert results["p-list"].startswith("subagent-1  subagent  status: running  bg task")
    assert results["p-out"] == "background answer\n[status: completed]"
    assert sessions[children[0]][1][0]["data"]["parentCallId"] == "p-bg"
