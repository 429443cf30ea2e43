"""kill -9 of ``dsh chat`` while a child's tool runs: on resume both sessions are repaired,
nothing committed is lost, and nothing of the child keeps running."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from tests.apps.conftest import bucket, dsh_env
from tests.llm.sse_server import Reply
from tests.plugins.subagent.support import (
    CHILD_MARK,
    NO_PROXY,
    RoutedServer,
    call_reply,
    events_of,
    split,
    system_of,
    text_reply,
    tool_messages,
)
from tests.trust.test_plain_user import _as_user

pytestmark = [pytest.mark.slow, pytest.mark.sigkill]

CRASH_TEXT = "Tool call interrupted by a crash; no result was recorded."
TOKEN = "73.25"  # the child's sleep, unique enough to find in /proc


def _route(body: dict[str, Any]) -> Reply:
    if CHILD_MARK in system_of(body):
        return call_reply([("c-bash", "bash", {"command": f"touch started; sleep {TOKEN}", "description": "slow"})])
    if not tool_messages(body):
        return call_reply([("p-sub", "subagent", {"description": "slow work", "prompt": "run the slow thing"})])
    return text_reply("resumed fine")


def _sleepers() -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if f"sleep\0{TOKEN}".encode() in cmdline:
                found.append(int(pid))
    return found


def _scenario(base: Path, prefix: list[str]) -> None:
    cwd = base / "project"
    cwd.mkdir()
    home = base / "home"
    home.mkdir()
    root = base / "sessions"
    env = {"HOME": str(home), "DSH_HOME": str(home / "dsh"), **NO_PROXY}
    if prefix:
        uid, gid = int(prefix[1].split("=")[1]), int(prefix[2].split("=")[1])
        for path in [base, *base.rglob("*")]:
            os.chown(path, uid, gid)

    def sessions() -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
        out = {}
        for path in sorted(bucket(root, cwd).glob("*.jsonl")):
            header, events = events_of(path)
            out[header["id"]] = (header, events)
        return out

    with RoutedServer(_route) as server:
        args = ["chat", "--base-url", server.base_url, "--model", "m", "--root", str(root)]
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "dsh", *args], cwd=cwd, env=dsh_env(**env),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while not (cwd / "started").exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the child's tool never started"
            time.sleep(0.05)
        before = sessions()
        proc.kill()
        proc.wait(timeout=10)
        proc.stdin.close()
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
        parents, children = split(before)
        assert len(parents) == 1 and len(children) == 1
        parent_id, child_id = parents[0], children[0]
        resumed = subprocess.run(
            [*prefix, sys.executable, "-m", "dsh", *args, "--continue"], cwd=cwd, env=dsh_env(**env),
            input="and now?\n", capture_output=True, text=True, timeout=60,
        )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed fine" in resumed.stdout
    after = sessions()
    assert set(after) == {parent_id, child_id}  # --continue took the parent, not the child
    for sid in (parent_id, child_id):
        kept = before[sid][1]
        # Nothing committed is lost: every event on disk at the kill is still there, unchanged.
        assert after[sid][1][: len(kept)] == kept
    parent_events = after[parent_id][1]
    crash_result = next(e for e in parent_events if e["type"] == "tool/result" and e["data"]["callId"] == "p-sub")
    assert crash_result["data"]["content"] == [{"type": "text", "text": CRASH_TEXT}]
    ends = [e["data"]["reason"]["kind"] for e in parent_events if e["type"] == "turn/end"]
    assert ends == ["interrupted", "completed"]
    child_events = after[child_id][1]
    child_result = next(e for e in child_events if e["type"] == "tool/result")
    assert child_result["data"]["callId"] == "c-bash"
    assert child_result["data"]["content"] == [{"type": "text", "text": CRASH_TEXT}]
    assert child_events[-1]["type"] == "turn/end"
    assert child_events[-1]["data"]["reason"] == {"kind": "interrupted"}
    deadline = time.monotonic() + 5
    while _sleepers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _sleepers() == []


def test_kill_9_mid_child_tool_leaves_both_sessions_repairable(tmp_path: Path) -> None:
    _scenario(tmp_path, [])


def test_kill_9_mid_child_tool_as_a_plain_user() -> None:
    prefix = _as_user()
    # pytest's tmp_path sits under a 0700 root folder a plain user cannot traverse.
    base = Path(tempfile.mkdtemp(prefix="dsh-subagent-user-"))
    try:
        _scenario(base, prefix)
    finally:
        shutil.rmtree(base, ignore_errors=True)
