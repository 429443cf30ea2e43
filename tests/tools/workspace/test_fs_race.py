"""``write`` against a background job that swaps a workspace folder with a symlink to an outside
folder (``renameat2(RENAME_EXCHANGE)`` in a loop) while the model writes 300 files into it,
through the real ``dsh run`` and a scripted model on loopback.

Every write must either land inside the workspace or be refused: nothing outside, and no
``.dsh-tmp`` file left anywhere."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import NO_PROXY, calls, done, model_args, tool_results
from tests.apps.conftest import dsh_env, run_dsh
from tests.llm.sse_server import SSEServer
from ws_support import needs_bwrap

pytestmark = [pytest.mark.attack, pytest.mark.slow]

SWAP = """\
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
renameat2 = libc.renameat2
AT_FDCWD, RENAME_EXCHANGE = -100, 2
open("ready", "w").close()
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    if renameat2(AT_FDCWD, b"d", AT_FDCWD, b"l", RENAME_EXCHANGE) != 0:
        raise SystemExit(f"renameat2 failed: errno {ctypes.get_errno()}")
"""

WAIT_READY = "for i in $(seq 100); do [ -e ready ] && exit 0; sleep 0.1; done; exit 1"
FILES = 300


@needs_bwrap
def test_writes_racing_a_folder_swap_never_land_outside(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / "d").mkdir()
    (ws / "l").symlink_to(outside)
    (ws / "swap.py").write_text(SWAP)
    writes = [("write", {"file_path": f"d/f{i}.txt", "content": f"file {i}\n"}) for i in range(FILES)]
    with SSEServer() as server:
        server.push(calls(("bash", {"command": "python3 swap.py", "description": "swap", "run_in_background": True})))
        server.push(calls(("bash", {"command": WAIT_READY, "description": "wait for the swapper"}), start=2))
        for batch in range(0, FILES, 100):
            server.push(calls(*writes[batch : batch + 100], start=10 + batch))
        server.push(calls(("job_kill", {"job_id": "bash-1"}), start=1000))
        server.push(done())
        result = run_dsh(["run", "write the files", *model_args(server.base_url)], ws, timeout=300, **NO_PROXY)
    assert result.returncode == 0, result.stderr
    results = tool_results(ws)
    assert results[1] == ("bash", "(no output)\n", False), results[:2]
    assert results[-1][0] == "job_kill" and "bash-1" in results[-1][1], results[-1]
    write_results = [r for r in results if r[0] == "write"]
    assert len(write_results) == FILES
    assert sorted(os.listdir(outside)) == [], "a write landed outside the workspace"
    created = [text for _, text, error in write_results if not error]
    refused = [text for _, text, error in write_results if error]
    assert all(t.startswith("Created d/f") for t in created), created[:3]
    # Whichever of d and l is the real folder now holds every file reported created.
    real = ws / "d" if not (ws / "d").is_symlink() else ws / "l"
    landed = sorted(os.listdir(real))
    assert len(landed) == len(created) and len(created) + len(refused) == FILES
    leftovers = [p for p in (*ws.rglob("*"), *outside.rglob("*")) if p.name.endswith(".dsh-tmp")]
    assert leftovers == []
    # The swap really raced the writes: some were refused, each with one of the three refusals
    # (outside the workspace, a link appeared while opening, or the path kept changing while
    # ``realpath`` resolved it).
    assert refused
    for message in refused:
        assert "[sandbox: file access denied under workspace-write mode]" in message or (
            "the path changed while it was being opened (a symlink appeared in it)" in message
        ) or "it kept changing while it was being resolved" in message, message


def test_a_write_failing_midway_leaves_no_temp_file(tmp_path: Path) -> None:
    """dsh runs with a file-size limit (RLIMIT_FSIZE) below what an ``edit`` writes: the write
    fails half-way (EFBIG), the file keeps its content and no temp file is left next to it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    original = ("a" * 99 + "\n") * 1000  # 100 kB; the edit makes it 1 MB
    (ws / "big.txt").write_text(original)
    limit = 600 * 1024  # above the session log (the read result is capped at 50 kB), below 1 MB

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    with SSEServer() as server:
        server.push(calls(("read", {"file_path": "big.txt"})))
        server.push(calls(("edit", {"file_path": "big.txt", "old_string": "a", "new_string": "b" * 10, "replace_all": True}), start=2))
        server.push(done())
        result = subprocess.run(
            [sys.executable, "-m", "dsh", "run", "grow it", *model_args(server.base_url)],
            cwd=ws, env=dsh_env(**NO_PROXY), capture_output=True, text=True, timeout=60,
            preexec_fn=cap, stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 0, result.stderr
    [_read, (name, text, is_error)] = tool_results(ws)
    assert name == "edit" and is_error and text == 'Error: cannot edit "big.txt": File too large', text
    assert (ws / "big.txt").read_text() == original
    assert sorted(os.listdir(ws)) == ["big.txt"]
