"""A closed stdout ends every command quietly: status 0 or 141, nothing on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apps.conftest import dsh_env, run_dsh, session_files


def _with_closed_stdout(args: list[str], cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before dsh writes a byte
    try:
        return subprocess.run([sys.executable, "-m", "dsh", *args], stdout=write, stderr=subprocess.PIPE,
                              input=stdin, cwd=cwd, env=dsh_env(), timeout=60)
    finally:
        os.close(write)


@pytest.fixture
def session_id(workdir: Path) -> str:
    result = run_dsh(["chat"], workdir, stdin="one\ntwo\n")
    assert result.returncode == 0, result.stderr
    [log] = session_files(workdir)
    return log.stem


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["sessions", "requests", "{id}"],
        ["sessions", "requests", "{id}", "--json"],
        ["sessions", "show", "{id}"],
        ["sessions", "show", "{id}", "--events"],
        ["sessions", "show", "{id}", "--json"],
        ["sessions", "list"],
        ["sessions", "list", "--json"],
        ["sessions", "export", "{id}"],
        ["--version"],
        ["--help"],
        ["chat"],
    ],
)
def test_every_command_exits_quietly_when_stdout_is_closed(workdir: Path, session_id: str, command: list[str]) -> None:
    args = [part.replace("{id}", session_id) for part in command]
    result = _with_closed_stdout(args, workdir, stdin=b"hello\n")
    assert result.returncode in (0, 141)
    assert result.stderr == b""


@pytest.mark.slow
def test_chat_into_head_stops_cleanly(workdir: Path) -> None:
    lines = "".join(f"line {i}\n" for i in range(200))
    script = 'printf "%s" "$LINES_IN" | "$PY" -m dsh chat 2>err.txt | head -2 >/dev/null; echo "${PIPESTATUS[1]}"'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=workdir, timeout=120,
                            env=dsh_env(LINES_IN=lines, PY=sys.executable))
    assert result.stdout.strip() in ("0", "141")
    assert (workdir / "err.txt").read_text() == ""
    # What ran is recorded consistently: contiguous seqs, every turn closed.
    [log] = session_files(workdir)
    events = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert sum(e["type"] == "turn/start" for e in events) == sum(e["type"] == "turn/end" for e in events)
    assert sum(e["type"] == "turn/start" for e in events) < 200  # it stopped instead of running on


def test_sessions_requests_into_head(workdir: Path, session_id: str) -> None:
    script = f'"$PY" -m dsh sessions requests {session_id} 2>err.txt | head -1; echo "rc=${{PIPESTATUS[0]}}"'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=workdir, timeout=60,
                            env=dsh_env(PY=sys.executable))
    assert result.stdout.splitlines()[0].startswith("── turn 1 step 1")
    assert result.stdout.splitlines()[-1] in ("rc=0", "rc=141")
    assert (workdir / "err.txt").read_text() == ""
