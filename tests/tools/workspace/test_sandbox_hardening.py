"""The sandbox's hardening in-process (the CLI attacks are tests/reliability/test_sandbox_*.py):
a bubblewrap that leaves capabilities is refused, the shell environment's secret filter and its
config, private folders that refuse planted links and are removed on dispose, and the spill cap
of a single call."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ws_support import needs_bwrap

from dsh._secrets import register_secret_env
from dsh.tools.workspace.environment import ShellEnvironment, shell_environment
from dsh.tools.workspace.private import PrivateDir, PrivateDirError

pytestmark = pytest.mark.attack

UNCONFINED = {"sandbox": "danger-full-access", "askUnconfinedBash": False}


@pytest.mark.skipif(os.geteuid() != 0, reason="only root keeps capabilities without bubblewrap's drop")
async def test_a_bwrap_that_keeps_capabilities_is_refused(make_ws: Any, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    # Runs the command after "--" with no confinement at all: root's capabilities stay.
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; shift; exec "$@"\n')
    fake.chmod(0o755)
    ws = await make_ws(bwrap=str(fake))
    result = await ws.run("bash", {"command": "touch ran", "description": "t"})
    assert result.is_error and result.error == {"name": "ToolError", "code": "SANDBOX_UNAVAILABLE"}
    text = result.content[0]["text"]
    assert "sandbox unavailable: bubblewrap cannot start (the confined command kept capabilities 000001" in text
    assert not (ws.root / "ran").exists()


def test_secret_names_and_values_are_dropped() -> None:
    register_secret_env("ODD_LLM_VAR")
    source = {
        "PATH": "/bin", "HOME": "/h", "OPENAI_API_KEY": "k1", "GitHub_Token": "k2", "AWS_SECRET_ACCESS_KEY": "k3",
        "PGPASSWORD": "k4", "ODD_LLM_VAR": "k5", "ALIAS": "k5", "DSH_DATABASE_URL": "postgres://u:p@h/d",
        "DATABASE_URL": "postgres://u:p@h/d2", "KEEP_KEY_ID": "visible", "EDITOR": "vi",
    }
    env = shell_environment(ShellEnvironment(passthrough=["KEEP_*"], set={"EXTRA": "1", "EDITOR": "nano"}), source)
    assert env == {"PATH": "/bin", "HOME": "/h", "KEEP_KEY_ID": "visible", "EDITOR": "nano", "EXTRA": "1"}


async def test_shell_environment_config_reaches_bash(make_ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_API_KEY", "hidden-value")
    monkeypatch.setenv("PASS_ME_TOKEN", "shown-value")
    ws = await make_ws(shellEnvironment={"passthrough": ["PASS_ME_*"], "set": {"FIXED": "v"}}, **UNCONFINED)
    out = await ws.text("bash", {"command": "env", "description": "t"})
    assert "PASS_ME_TOKEN=shown-value" in out and "FIXED=v" in out and "hidden-value" not in out


async def test_unknown_shell_environment_key_is_a_config_error(make_ws: Any) -> None:
    with pytest.raises(Exception, match="passthru"):
        await make_ws(shellEnvironment={"passthru": ["X"]})


def test_private_dir_is_fresh_refuses_links_and_is_removed(tmp_path: Path) -> None:
    base = tmp_path / "base"
    folder = PrivateDir("dsh-test-", str(base))
    first = folder.session_dir("s/1")
    assert first.parent.parent == base and first.name == "s_1"
    assert (first.stat().st_mode & 0o777, first.parent.stat().st_mode & 0o777) == (0o700, 0o700)
    victim = tmp_path / "victim"
    victim.mkdir()
    (first.parent / "s2").symlink_to(victim)
    with pytest.raises(PrivateDirError, match="is not a private folder"):
        folder.session_dir("s2")
    (first / "f").write_text("x")
    (first / "locked").mkdir()
    (first / "locked" / "g").write_text("y")
    (first / "locked").chmod(0)
    root = folder.created
    folder.dispose()
    assert root is not None and not root.exists() and victim.exists()
    assert PrivateDir("dsh-test-", str(base)).session_dir("s/1") != first  # a fresh random name


def test_a_shared_base_without_sticky_bit_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "open"
    base.mkdir()
    base.chmod(0o777)
    if os.geteuid() == 0:
        os.chown(base, 65534, 65534)
    else:
        pytest.skip("needs root to give the folder to another user")
    with pytest.raises(PrivateDirError, match="no sticky bit"):
        PrivateDir("dsh-test-", str(base)).root()


def test_xdg_runtime_dir_is_used_only_when_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert PrivateDir("dsh-test-").root().parent == runtime
    runtime.chmod(0o755)
    assert PrivateDir("dsh-test-").root().parent != runtime


@needs_bwrap
async def test_one_call_keeps_at_most_its_spill_cap(make_ws: Any, tmp_path: Path) -> None:
    ws = await make_ws(maxSpillBytes=100_000, maxOutputBytes=1000)
    out = await ws.text("bash", {"command": "seq 1 200000", "description": "t"})
    assert out.splitlines()[-2] == "200000"
    marker = out.splitlines()[-1]
    assert marker.startswith("[output truncated; the first 100000 of 1288895 bytes were kept in "), out
    path = Path(marker.split(" kept in ")[1].split(" (spill cap")[0])
    assert path.stat().st_size == 100_000 and path.read_text().startswith("1\n2\n")


def test_folders_of_a_killed_process_are_removed_by_the_next(tmp_path: Path) -> None:
    base = tmp_path / "base"
    folder = PrivateDir("dsh-test-", str(base))
    orphan = folder.session_dir("s").parent
    alive = PrivateDir("dsh-test-", str(base)).session_dir("s").parent  # this process: alive
    unsure = base / "dsh-test-nopid"
    unsure.mkdir(mode=0o700)  # no .pid yet: perhaps being made right now
    pid_text, _, namespace = (orphan / ".pid").read_text().partition(" ")
    gone = subprocess.Popen(["true"])
    gone.wait()
    (orphan / ".pid").write_text(f"{gone.pid} {namespace}")
    other_ns = base / "dsh-test-otherns"
    other_ns.mkdir(mode=0o700)
    (other_ns / ".pid").write_text(f"{gone.pid} pid:[1]")
    assert int(pid_text) == os.getpid()
    fresh = PrivateDir("dsh-test-", str(base)).root()
    assert not orphan.exists()
    assert alive.exists() and unsure.exists() and other_ns.exists() and fresh.exists()
