"""Cancelling the parent's turn (Ctrl-C / SIGINT on ``dsh run``) cancels its children: each
child turn ends ``aborted``, and the parent's call gets an error result."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.apps.conftest import dsh_env
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
        return Reply.hanging(30)
    if not tool_messages(body):
        return call_reply([
            ("p-a", "subagent", {"description": "one", "prompt": "hang one"}),
            ("p-b", "subagent", {"description": "two", "prompt": "hang two"}),
        ])
    return text_reply("unexpected")


def test_cancelling_the_parent_turn_aborts_every_child(tmp_path: Path) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    with RoutedServer(_route) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dsh", "run", "go", "--base-url", server.base_url, "--model", "m"],
            cwd=cwd, env=dsh_env(HOME=str(tmp_path), **NO_PROXY),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while sum(CHILD_MARK in system_of(r.json) for r in server.requests) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    sessions = stored_sessions(cwd)
    parents, children = split(sessions)
    assert len(children) == 2
    for child in children:
        ends = [e["data"]["reason"] for e in sessions[child][1] if e["type"] == "turn/end"]
        assert len(ends) == 1 and ends[0]["kind"] == "aborted"
    parent_events = sessions[parents[0]][1]
    assert [e["data"]["reason"]["kind"] for e in parent_events if e["type"] == "turn/end"] == ["aborted"]
    results = [e for e in parent_events if e["type"] == "tool/result"]
    assert [e["data"]["callId"] for e in results] == ["p-a", "p-b"]
    assert all(e["data"]["isError"] for e in results)
