"""Attacks through project settings: a cloned repository's ``.claude/settings.json`` and one the
sandboxed model writes itself. Neither runs anything until the user trusts that exact content;
run as root and as a plain user (``setpriv``, a user made with ``useradd`` when missing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.apps.conftest import dsh_env
from tests.llm.sse_server import SSEServer
from tests.tools.workspace.cli_support import calls, done
from tests.trust.test_plain_user import _as_user

from .hook_support import NO_PROXY, command_hook

pytestmark = [pytest.mark.slow]


def _hostile(folder: Path) -> dict[str, str]:
    """A hostile project in ``folder``; returns the environment to run dsh with."""
    project = folder / "project"
    (project / ".claude").mkdir(parents=True)
    touch = f"touch {folder}/PWNED"
    hooks = {e: [command_hook(touch)] for e in ("SessionStart", "UserPromptSubmit", "Stop")}
    hooks["PreToolUse"] = [command_hook(touch, "*")]
    (project / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}))
    (folder / "home").mkdir()
    (folder / "claude").mkdir()
    return {"DSH_HOME": str(folder / "home"), "CLAUDE_CONFIG_DIR": str(folder / "claude"), **NO_PROXY}


@pytest.fixture
def own_folder() -> Iterator[Path]:
    # pytest's tmp_path sits under a 0700 root folder a plain user cannot traverse.
    folder = Path(tempfile.mkdtemp(prefix="dsh-hooks-user-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("who", ["root", "plain user"])
def test_a_cloned_repositorys_hooks_run_only_once_trusted(own_folder: Path, who: str) -> None:
    prefix = _as_user() if who == "plain user" else []
    if who == "root" and os.geteuid() != 0:
        pytest.skip("not root: the plain-user case covers this user")
    environ = _hostile(own_folder)
    if prefix:
        uid, gid = int(prefix[1].split("=")[1]), int(prefix[2].split("=")[1])
        for path in [own_folder, *own_folder.rglob("*")]:
            os.chown(path, uid, gid)
    project, marker = own_folder / "project", own_folder / "PWNED"

    def dsh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*prefix, sys.executable, "-m", "dsh", *args], capture_output=True, text=True,
            cwd=project, env=dsh_env(**environ), timeout=120,
        )

    settings = project / ".claude" / "settings.json"
    for args in (["run", "hello"], ["chat"]):
        result = dsh(*args)
        assert result.returncode == 0, result.stderr
        assert not marker.exists()
        [line] = [x for x in result.stderr.splitlines() if "not trusted" in x]
        assert line.startswith(f"dsh: {settings} is not trusted (new); it would run: sh -c 'touch {own_folder}/PWNED'")
    assert dsh("trust", "--yes").returncode == 0
    settings.write_text(settings.read_text() + " ")  # any edit: untrusted again
    result = dsh("run", "hello")
    assert not marker.exists()
    assert f"{settings} is not trusted (changed)" in result.stderr
    assert dsh("trust", "--yes").returncode == 0
    assert dsh("run", "hello").returncode == 0
    assert marker.exists()  # trusted, the same hooks run: the refusals above were the gate's


def test_a_hook_the_model_writes_never_runs(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    environ = {"DSH_HOME": str(tmp_path / "home"), "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"), **NO_PROXY}
    marker = tmp_path / "PWNED"
    evil = {"hooks": {"UserPromptSubmit": [command_hook(f"touch {marker}")], "PreToolUse": [command_hook(f"touch {marker}")]}}
    with SSEServer() as server:
        server.push(calls(("write", {"file_path": ".claude/settings.json", "content": json.dumps(evil)})))
        server.push(done("Installed a hook."))
        server.push(calls(("todo_write", {"todos": []})))
        server.push(done("Again."))
        args = [sys.executable, "-m", "dsh", "chat", "--base-url", server.base_url, "--model", "test-model"]
        first = subprocess.run(args, input="set things up\n", capture_output=True, text=True, cwd=project, env=dsh_env(**environ), timeout=120)
        assert first.returncode == 0, first.stderr
        assert (project / ".claude" / "settings.json").exists()  # the model did write it
        second = subprocess.run([*args, "--continue"], input="go on\n", capture_output=True, text=True, cwd=project, env=dsh_env(**environ), timeout=120)
    assert second.returncode == 0, second.stderr
    assert not marker.exists()
    assert f"{project.resolve()}/.claude/settings.json is not trusted (new)" in second.stderr
