"""``kill -9`` in the middle of ``dsh sessions rewind``, then the same command: the tree ends as
asked. Every file is either its old or its new self at the kill (temp file + rename), and the
rerun finishes the restore and removes any temporary file the killed run left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.apps.conftest import dsh_env, run_dsh, session_files
from tests.llm.sse_server import SSEServer
from tests.rewind.support import NO_PROXY, call, session_id_of, text, tree_state

pytestmark = [pytest.mark.slow, pytest.mark.sigkill]

FILES = 3000


def test_kill_during_restore_then_rerun_finishes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for i in range(FILES):
        (repo / f"f{i:05d}").write_text(f"original {i}\n" * 50)
    before = tree_state(repo)
    bash = f"for i in $(seq -w 0 {FILES - 1}); do echo changed >> f0$i; done; rm f00007; echo new > made"
    with SSEServer() as server:
        server.push(call(1, "bash", {"command": bash, "description": "touch everything"}), text("done"))
        chat = run_dsh(["chat", "--base-url", server.base_url, "--model", "test-model"], repo,
                       stdin="go\n", timeout=120, **NO_PROXY)
    assert chat.returncode == 0, chat.stderr
    assert not (repo / "f00007").exists() and (repo / "made").exists()
    [log] = session_files(repo)
    sid = session_id_of(log)
    first, last = repo / "f00000", repo / f"f{FILES - 1:05d}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsh", "sessions", "rewind", sid, "--to-turn", "1"],
        cwd=repo, env=dsh_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if first.read_text() == "original 0\n" * 50:
            break
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the restore finished before the kill"
    assert "changed" in last.read_text()  # the kill came mid-restore: the last file not yet back
    state = tree_state(repo)
    for i in (0, 1, FILES // 2, FILES - 1):  # each file is whole: old or new, never torn
        content = state[f"f{i:05d}"][2]
        assert content in ((f"original {i}\n" * 50).encode(), (f"original {i}\n" * 50 + "changed\n").encode())
    again = run_dsh(["sessions", "rewind", sid, "--to-turn", "1"], repo)
    assert again.returncode == 0, again.stderr
    assert tree_state(repo) == before
    assert not [p for p in os.listdir(repo) if p.startswith(".dsh-rewind-")]
