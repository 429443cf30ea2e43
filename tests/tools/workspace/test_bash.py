"""bash: results, markers, spill, timeouts and cancel (no orphans, checked by pid), and the
sandbox (writes outside the workspace, read-only, network, failing closed)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from tests.support.wait import wait_until
from ws_support import needs_bwrap

from dsh.runtime import AbortController

UNCONFINED = {"sandbox": "danger-full-access", "askUnconfinedBash": False}


def _gone(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _marked(marker: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or ())
        if marker in cmd and "pytest" not in cmd:
            found.append(proc.pid)
    return found


async def _wait_gone(predicate: Any, timeout: float = 5.0) -> bool:
    return await wait_until(predicate, timeout, check=False)


async def test_output_stderr_and_exit_code(make_ws: Any) -> None:
    ws = await make_ws(**UNCONFINED)
    out = await ws.text("bash", {"command": "echo out; echo err >&2; exit 3", "description": "t"})
    assert out == "out\n[stderr]\nerr\n[exit code: 3]\n"
    assert await ws.text("bash", {"command": "true", "description": "t"}) == "(no output)\n"
    assert await ws.text("bash", {"command": "pwd", "description": "t", "workdir": "."}) == f"{ws.root}\n"
    env = await ws.text("bash", {"command": "echo $DSH_SESSION_ID $TERM", "description": "t"})
    assert env == "s1 dumb\n"


async def test_huge_output_is_spilled(make_ws: Any) -> None:
    ws = await make_ws(maxOutputBytes=1000, **UNCONFINED)
    out = await ws.text("bash", {"command": "seq 1 100000", "description": "t"})
    assert out.rstrip().splitlines()[-2] == "100000"
    marker = out.rstrip().splitlines()[-1]
    assert marker.startswith("[output truncated; full output: ")
    spill = Path(marker.removeprefix("[output truncated; full output: ").removesuffix("]"))
    lines = spill.read_text().splitlines()
    assert lines[0] == "1" and lines[-1] == "100000" and len(lines) == 100000
    assert len(out) < 1200


async def test_timeout_kills_the_whole_group(make_ws: Any) -> None:
    ws = await make_ws(graceMs=200, **UNCONFINED)
    pidfile = ws.root / "pids"
    command = f"sleep 300 & echo $! > {pidfile}; sleep 301; echo never"
    out = await ws.text("bash", {"command": command, "description": "t", "timeoutMs": 500})
    assert "[timed out after 500ms]" in out and "never" not in out
    child = int(pidfile.read_text())
    assert await _wait_gone(lambda: _gone(child)), "background child survived the timeout"


async def test_cancel_kills_the_group(make_ws: Any) -> None:
    ws = await make_ws(graceMs=200, **UNCONFINED)
    pidfile = ws.root / "pids"
    controller = AbortController()
    task = asyncio.ensure_future(
        ws.run("bash", {"command": f"sleep 302 & echo $! > {pidfile}; wait", "description": "t"}, signal=controller.signal)
    )
    await wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the pid file")
    controller.abort("interrupted by the user")
    result = await task
    assert result.is_error and result.content[0]["text"] == "Error: tool call aborted"
    child = int(pidfile.read_text())
    assert await _wait_gone(lambda: _gone(child))


async def test_task_cancellation_kills_the_group(make_ws: Any) -> None:
    ws = await make_ws(**UNCONFINED)
    pidfile = ws.root / "pids"
    task = asyncio.ensure_future(ws.run("bash", {"command": f"echo $$ > {pidfile}; sleep 303", "description": "t"}))
    await wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the pid file")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _wait_gone(lambda: _gone(int(pidfile.read_text())))


async def test_unconfined_bash_asks_and_fails_closed(make_ws: Any) -> None:
    ws = await make_ws(sandbox="danger-full-access")
    result = await ws.run("bash", {"command": "touch ran", "description": "t"})
    assert result.is_error and "approval unavailable" in result.content[0]["text"]
    assert not (ws.root / "ran").exists()


async def test_missing_bwrap_fails_closed(make_ws: Any) -> None:
    ws = await make_ws(bwrap="/nonexistent/bwrap")
    result = await ws.run("bash", {"command": "touch ran", "description": "t"})
    assert result.is_error
    text = result.content[0]["text"]
    assert "sandbox unavailable: bubblewrap (bwrap) is not installed" in text
    assert "danger-full-access" in text
    assert result.error == {"name": "ToolError", "code": "SANDBOX_UNAVAILABLE"}
    assert not (ws.root / "ran").exists()


@needs_bwrap
async def test_workspace_write_confines_bash(make_ws: Any, tmp_path: Path) -> None:
    ws = await make_ws()
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws.root / "link").symlink_to(outside)
    out = await ws.text("bash", {"command": "echo ok > inside.txt && cat inside.txt", "description": "t"})
    assert out == "ok\n"
    for command in (f"echo x > {outside}/a", "echo x > ../outside/b", "echo x > link/c", "echo x > /tmp/dsh-escape-test"):
        out = await ws.text("bash", {"command": command, "description": "t"})
        assert "[sandbox: file access denied under workspace-write mode]" in out, (command, out)
    assert list(outside.iterdir()) == []
    assert not Path("/tmp/dsh-escape-test").exists()
    # The per-session temp dir is writable (TMPDIR).
    assert await ws.text("bash", {"command": 'echo t > "$TMPDIR/t" && cat "$TMPDIR/t"', "description": "t"}) == "t\n"


@needs_bwrap
async def test_read_only_refuses_writes_everywhere(make_ws: Any) -> None:
    ws = await make_ws(sandbox="read-only")
    out = await ws.text("bash", {"command": "echo x > in.txt", "description": "t"})
    assert "[sandbox: file access denied under read-only mode]" in out
    assert not (ws.root / "in.txt").exists()
    assert await ws.text("bash", {"command": "echo fine > /dev/null; echo ok", "description": "t"}) == "ok\n"


@needs_bwrap
async def test_network_is_blocked_by_default(make_ws: Any) -> None:
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        ws = await make_ws()
        probe = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected || echo blocked"
        out = await ws.text("bash", {"command": probe, "description": "t"})
        assert "blocked" in out and "connected" not in out
        open_ws = await make_ws(network=True)
        assert "connected" in await open_ws.text("bash", {"command": probe, "description": "t"})
    finally:
        server.close()


@needs_bwrap
async def test_sandboxed_timeout_leaves_no_process(make_ws: Any) -> None:
    ws = await make_ws(graceMs=200)
    marker = f"{os.getpid()}.{time.monotonic_ns() % 100000}"
    out = await ws.text(
        "bash",
        {"command": f"setsid sleep {marker} & sleep 304.{marker[-3:]}", "description": "t", "timeoutMs": 500},
    )
    assert "[timed out after 500ms]" in out
    assert await _wait_gone(lambda: not _marked(marker)), _marked(marker)
