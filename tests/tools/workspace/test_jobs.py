"""Background jobs: start, incremental reads ending in ``[status: ...]``, wait, kill, owner
isolation, "lost" after the process that ran them is gone, and no job outliving the plugin."""

from __future__ import annotations

import re
from typing import Any

import psutil
from tests.support.wait import wait_until
from ws_support import Workspace, make_agent

UNCONFINED = {"sandbox": "danger-full-access", "askUnconfinedBash": False}


async def _start(ws: Workspace, command: str) -> str:
    out = await ws.text("bash", {"command": command, "description": "t", "run_in_background": True})
    match = re.fullmatch(r"started background job (\S+)\njob_id: (\S+)", out)
    assert match and match[1] == match[2], out
    return match[1]


async def test_incremental_output_and_wait(make_ws: Any) -> None:
    ws = await make_ws(**UNCONFINED)
    job = await _start(ws, "echo one; sleep 0.3; echo two")
    first = await ws.text("job_output", {"job_id": job, "wait": True, "timeout_ms": 100})
    assert first.endswith("[status: running]") and "two" not in first
    rest = await ws.text("job_output", {"job_id": job, "wait": True})
    assert rest.endswith("[status: completed, exit code: 0]")
    assert "two" in rest and ("one" in first) != ("one" in rest)  # each line read exactly once
    again = await ws.text("job_output", {"job_id": job})
    assert again == "[status: completed, exit code: 0]"
    listing = await ws.text("job_list", {})
    assert listing.startswith(f"{job}  bash  status: completed")


async def test_kill_and_isolation(make_ws: Any) -> None:
    ws = await make_ws(**UNCONFINED)
    job = await _start(ws, "echo $$ > pid; sleep 305")
    other = Workspace(ws.ctx, ws.root, make_agent(ws.root, "s2"))
    hidden = await other.run("job_output", {"job_id": job})
    assert hidden.is_error and "unknown job" in hidden.content[0]["text"]
    assert await other.text("job_list", {}) == "(no background jobs)"
    await wait_until(lambda: (ws.root / "pid").exists() and (ws.root / "pid").read_text().strip(), what="the pid file")
    pid = int((ws.root / "pid").read_text())
    killed = await ws.text("job_kill", {"job_id": job, "reason": "done with it"})
    assert killed.startswith(f"job {job} killed") and killed.endswith("[status: killed]")
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


async def test_jobs_die_with_the_plugin_and_are_lost_on_resume(make_ws: Any) -> None:
    ws = await make_ws(**UNCONFINED)
    job = await _start(ws, "echo $$ > pid; sleep 306")
    # The announcement reaches the log as the loop records it.
    ws.agent.session.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "bash", "arguments": "{}"})
    ws.agent.session.append(
        "tool/result",
        {"turn": 1, "step": 1, "callId": "c1", "content": [{"type": "text", "text": f"started background job {job}\njob_id: {job}"}], "isError": False},
        surface_op="append",
    )
    await wait_until(lambda: (ws.root / "pid").exists() and (ws.root / "pid").read_text().strip(), what="the pid file")
    pid = int((ws.root / "pid").read_text())
    await ws.ctx.dispose()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    # A new process (a fresh plugin) resuming the same session: the job is lost, not running.
    fresh = await make_ws(**UNCONFINED)
    resumed = Workspace(fresh.ctx, ws.root, ws.agent)
    out = await resumed.text("job_output", {"job_id": job})
    assert out.endswith("[status: lost]") and "earlier process" in out
    assert await resumed.text("job_list", {}) == f"{job}  bash  status: lost"
