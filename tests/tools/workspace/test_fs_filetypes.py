"""Hostile file types through the real CLI and a scripted model on loopback: ``read`` of a link to
``/dev/zero``, of a FIFO and of a socket each return an error at once (no memory blow-up, no hang);
SIGTERM and SIGINT reach ``dsh chat`` after a read of a FIFO; a ``grep`` that would run on is
stopped by ``searchTimeoutMs`` with a clear message and leaves no ripgrep behind."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from cli_support import NO_PROXY, calls, done, model_args, tool_results
from tests.apps.conftest import Interactive, dsh_env, session_files
from tests.llm.sse_server import Reply, SSEServer
from tests.support.wait import wait_until_sync

pytestmark = [pytest.mark.attack, pytest.mark.slow]

# A regression that reads /dev/zero whole must fail this test, not exhaust the machine.
MEMORY_CAP = 4 << 30


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run_capped(args: list[str], cwd: Path, *, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsh", *args], capture_output=True, text=True, cwd=cwd,
        env=dsh_env(**env), timeout=timeout, preexec_fn=_capped, stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Path]:
    """A workspace with a link to /dev/zero, a FIFO nobody writes, and a listening socket."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "zero").symlink_to("/dev/zero")
    os.mkfifo(ws / "fifo")
    (ws / "ok.txt").write_text("fine\n")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(ws / "sock"))
        sock.listen()
        yield ws


def test_devices_fifos_and_sockets_are_refused(hostile: Path) -> None:
    attempts = [
        ("read", {"file_path": "zero"}),
        ("read", {"file_path": "/dev/zero"}),
        ("read", {"file_path": "fifo"}),
        ("read", {"file_path": "sock"}),
        ("grep", {"pattern": "x", "path": "fifo"}),
        ("grep", {"pattern": "x", "path": "zero"}),
        ("write", {"file_path": "fifo", "content": "x"}),
        ("edit", {"file_path": "fifo", "old_string": "a", "new_string": "b"}),
        ("read", {"file_path": "ok.txt"}),
    ]
    expected = [
        'cannot read "/dev/zero": it is a character device, not a regular file',
        'cannot read "/dev/zero": it is a character device, not a regular file',
        'cannot read "fifo": it is a FIFO (named pipe), not a regular file',
        'cannot read "sock": it is a socket, not a regular file',
        'cannot search "fifo": it is a FIFO (named pipe), not a regular file or folder',
        'cannot search "/dev/zero": it is a character device, not a regular file or folder',
        'cannot write "fifo": it is a FIFO (named pipe), not a regular file',
        'cannot edit "fifo": it is a FIFO (named pipe), not a regular file',
    ]
    with SSEServer() as server:
        server.push(calls(*attempts))
        server.push(done())
        result = run_capped(["run", "read them", *model_args(server.base_url)], hostile, **NO_PROXY)
    assert result.returncode == 0, result.stderr
    results = tool_results(hostile)
    assert [name for name, _, _ in results] == [name for name, _ in attempts]
    for want, (_, text, is_error) in zip(expected, results, strict=False):
        assert is_error and text == f"Error: {want}", text
    assert results[-1][1].startswith("<path>ok.txt</path>") and not results[-1][2]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signals_reach_chat_after_a_fifo_read(hostile: Path, signum: int) -> None:
    with SSEServer() as server:
        server.push(calls(("read", {"file_path": "fifo"})))
        server.push(Reply.hanging(120))  # the turn is still running when the signal comes
        chat = Interactive(["chat", *model_args(server.base_url)], hostile, **NO_PROXY)
        try:
            chat.send("read the fifo\n")

            # The read must have returned (refused at once, not blocked on the FIFO) before the
            # signal: a signal between the logged call and its result cancels the call instead.
            def read_answered() -> bool:
                logs = session_files(hostile)
                return bool(logs) and '"tool/result"' in logs[0].read_text()

            wait_until_sync(read_answered, 60, "the read's result in the log")
            chat.proc.send_signal(signum)
            if signum == signal.SIGINT:
                chat.read_until("\n> ", count=2)  # the turn is cancelled, the prompt is back
            rc = chat.proc.wait(timeout=30) if signum == signal.SIGTERM else chat.close()[0]
        finally:
            if chat.proc.poll() is None:
                chat.proc.kill()
                chat.proc.wait()
    assert rc == 0
    [(name, text, is_error)] = tool_results(hostile)
    assert name == "read" and is_error
    assert text == 'Error: cannot read "fifo": it is a FIFO (named pipe), not a regular file'


def _rg_on(path: Path) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline and os.path.basename(cmdline[0]) == "rg" and any(str(path) in part for part in cmdline):
            found.append(proc.pid)
    return found


def test_a_grep_that_runs_on_is_stopped(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    # 300,000 matching lines: ripgrep needs far longer than 1 ms to report them all.
    (ws / "big.txt").write_text("needle\n" * 300_000)
    with SSEServer() as server:
        (tmp_path / "dsh.yaml").write_text(
            "- {id: llm, name: openai-llm, config: {models: [test-model], baseURL: '"
            + server.base_url + "', apiKey: none}}\n"
            "- {id: ws, name: workspace-tools, config: {searchTimeoutMs: 1}}\n"
            "- {id: app, name: stdio-app, config: {model: test-model}}\n"
        )
        server.push(calls(("grep", {"pattern": "needle"}), ("glob", {"pattern": "*.txt"})))
        server.push(done())
        result = run_capped(["run", "search", "--config", str(tmp_path / "dsh.yaml")], ws, **NO_PROXY)
    assert result.returncode == 0, result.stderr
    [(_, grep_text, grep_error), (_, glob_text, _)] = tool_results(ws)
    # glob only lists one name: it may finish within 1 ms or be stopped the same way.
    assert glob_text in ("big.txt", "Error: glob timed out after 1 ms (searchTimeoutMs) and was stopped — search a "
                         "smaller folder, or narrow the search with a more specific path or pattern"), glob_text
    assert grep_error
    assert grep_text == (
        "Error: grep timed out after 1 ms (searchTimeoutMs) and was stopped — search a smaller "
        "folder, or narrow the search with a more specific path or pattern"
    )
    assert _rg_on(ws) == []
