"""``dsh sessions delete`` removes a session's snapshots, ``dsh sessions gc`` prunes old ones, and
bad arguments get one line with exit 2."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.apps.conftest import run_dsh, session_files
from tests.llm.sse_server import SSEServer
from tests.rewind.support import NO_PROXY, call, session_id_of, text

pytestmark = [pytest.mark.slow]


def _one_turn(repo: Path, sandbox: str = "workspace-write") -> str:
    with SSEServer() as server:
        server.push(call(1, "write", {"file_path": "a.txt", "content": "a\n"}), text("done"))
        chat = run_dsh(["chat", "--base-url", server.base_url, "--model", "test-model", "--sandbox", sandbox],
                       repo, stdin="write a\n", timeout=120, **NO_PROXY)
    assert chat.returncode == 0, chat.stderr
    logs = session_files(repo)
    return session_id_of(max(logs, key=lambda p: p.stat().st_mtime))


def _stores() -> list[Path]:
    root = Path(os.environ["DSH_HOME"]) / "rewind"
    return sorted(root.glob("ws-*")) if root.is_dir() else []


def _refs(store: Path) -> list[str]:
    out = subprocess.run(["git", f"--git-dir={store / 'git'}", "for-each-ref", "--format=%(refname)", "refs/dsh/"],
                         capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]})
    return out.stdout.split()


def test_delete_removes_snapshots_and_gc_prunes_old_ones(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    first = _one_turn(repo)
    (repo / "a.txt").unlink()
    second = _one_turn(repo)
    [store] = [s for s in _stores() if (s / "workspace").read_text().strip() == str(repo)]
    assert len(_refs(store)) == 4  # two snapshots per session
    removed = run_dsh(["sessions", "delete", first, "--yes"], repo)
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.strip() == f"removed {first} and its 2 workspace snapshots"
    assert len(_refs(store)) == 2
    kept = run_dsh(["sessions", "gc"], repo)
    assert kept.returncode == 0 and kept.stdout.strip() == "removed 0 snapshots older than 30 days"
    assert run_dsh(["sessions", "diff", second], repo).stdout.count("+a") == 1
    pruned = run_dsh(["sessions", "gc", "--older-than", "0"], repo)
    assert pruned.stdout.strip() == "removed 2 snapshots older than 0 days (1 workspace store emptied)"
    assert not store.exists()
    gone = run_dsh(["sessions", "diff", second], repo)
    assert gone.returncode == 1 and gone.stderr.startswith("dsh: snapshot ") and "no longer stored" in gone.stderr


@pytest.mark.parametrize("sandbox", ["read-only", "danger-full-access"])
def test_snapshots_are_taken_under_every_sandbox_mode(tmp_path: Path, sandbox: str) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    sid = _one_turn(repo, sandbox)
    [log] = session_files(repo)
    assert log.read_text().count('"type":"workspace/snapshot"') == 2
    diff = run_dsh(["sessions", "diff", sid, "--turn", "1"], repo)
    assert diff.returncode == 0
    # read-only refuses the write, so nothing changed; danger-full-access wrote a.txt
    assert ("+a" in diff.stdout) == (sandbox == "danger-full-access")


def test_bad_turns_are_one_line_usage_errors(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    sid = _one_turn(repo)
    for args, message in (
        (["diff", sid, "--turn", "9"], "dsh: no turn 9 in this session (it has turns 1 to 1)"),
        (["rewind", sid, "--to-turn", "0"], "dsh: --to-turn must be 1 or more"),
        (["rewind", sid, "--to-turn", "5", "--both"], "dsh: no turn 5 in this session (it has turns 1 to 1)"),
    ):
        done = run_dsh(["sessions", *args], repo)
        assert (done.returncode, done.stderr.strip(), done.stdout) == (2, message, "")


def test_a_file_over_the_cap_is_named_and_left_alone(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    bash = "head -c 10485761 /dev/zero > big.bin && echo x > small.txt"
    with SSEServer() as server:
        server.push(call(1, "bash", {"command": bash, "description": "big"}), text("done"))
        chat = run_dsh(["chat", "--base-url", server.base_url, "--model", "test-model"], repo,
                       stdin="go\n", timeout=120, **NO_PROXY)
    assert chat.returncode == 0, chat.stderr
    [log] = session_files(repo)
    sid = session_id_of(log)
    assert '"tooBig":[{"path":"big.bin","bytes":10485761}]' in log.read_text()
    diff = run_dsh(["sessions", "diff", sid, "--turn", "1"], repo)
    assert "small.txt" in diff.stdout and "big.bin" not in diff.stdout
    assert diff.stderr == "dsh: big.bin: not in the diff: 10.5 MB is over the snapshot size cap, so it was never kept\n"
    back = run_dsh(["sessions", "rewind", sid, "--to-turn", "1"], repo)
    assert back.stdout == "restored 1 file to before turn 1: small.txt\n"
    assert back.stderr == "dsh: big.bin: left as it is: 10.5 MB is over the snapshot size cap, so it was never kept\n"
    assert (repo / "big.bin").stat().st_size == 10485761 and not (repo / "small.txt").exists()


def test_a_workspace_over_max_files_is_not_snapshotted_and_says_so_once(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for i in range(5):
        (repo / f"f{i}").write_text("x\n")
    with SSEServer() as server:
        (repo / "c.yml").write_text(
            "- {id: llm, name: openai-llm, config: {models: [test-model], baseURL: '" + server.base_url
            + "', apiKey: none}}\n- {id: ws, name: workspace-tools}\n"
            "- {id: rewind, name: rewind, config: {maxFiles: 3}}\n"
            "- {id: app, name: stdio-app, config: {model: test-model}}\n"
        )
        server.push(call(1, "bash", {"command": "echo y > g", "description": "a"}),
                    call(2, "bash", {"command": "echo z > h", "description": "b"}), text("done"))
        chat = run_dsh(["chat", "--config", "c.yml"], repo, stdin="go\n", timeout=120, **NO_PROXY)
    assert chat.returncode == 0, chat.stderr
    [log] = session_files(repo)
    assert "workspace/snapshot" not in log.read_text()
    warnings = [line for line in chat.stderr.splitlines() if "rewind" in line]
    assert len(warnings) == 1 and "more than maxFiles (3); not snapshotted" in warnings[0], chat.stderr
