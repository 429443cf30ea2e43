"""A hostile workspace and a hostile environment cannot make the snapshot git run code.

The workspace's own ``.git/config`` defines an fsmonitor, hooks, a ``filter.evil`` clean/smudge
pair and a ``diff.evil`` textconv/command; its ``.gitattributes`` names them for every file and
asks for CRLF conversion and ``$Id$`` expansion; a nested repository has the same config; the
environment dsh runs in sets ``GIT_CONFIG_COUNT``/``GIT_CONFIG_PARAMETERS``, ``GIT_DIR``,
``GIT_EXTERNAL_DIFF``, a ``GIT_CONFIG_GLOBAL`` and a ``$HOME/.gitconfig`` doing the same.
Each program would create a file in a canary folder. Through the real ``dsh chat`` (a scripted
model whose ``bash`` call changes files, with hostile names), ``dsh sessions diff`` and
``dsh sessions rewind``: the canary stays empty, the bytes come back exactly (CRLF and ``$Id$``
untouched) and the user's ``.git`` is unchanged.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.apps.conftest import run_dsh, session_files
from tests.llm.sse_server import SSEServer
from tests.rewind.support import NO_PROXY, call, git_state, session_id_of, text, tree_state

pytestmark = [pytest.mark.slow]


def _evil_config(canary: Path, tag: str) -> str:
    touch = f"touch {canary}/{tag}"
    return (
        f"[core]\n\tfsmonitor = \"{touch}-fsmonitor\"\n\thooksPath = hooks\n\tpager = {touch}-pager\n"
        f"[filter \"evil\"]\n\tclean = \"{touch}-clean; cat\"\n\tsmudge = \"{touch}-smudge; cat\"\n"
        f"\tprocess = {touch}-process\n\trequired = true\n"
        f"[diff \"evil\"]\n\ttextconv = \"{touch}-textconv; cat\"\n\tcommand = {touch}-diffcmd\n"
        f"[diff]\n\texternal = {touch}-external\n"
    )


def _hostile_repo(root: Path, canary: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    with open(repo / ".git" / "config", "a") as handle:
        handle.write(_evil_config(canary, "user-repo"))
    hooks = repo / ".git" / "hooks"
    for hook in ("post-index-change", "pre-commit", "post-checkout", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {canary}/hook-{hook}\n")
        (hooks / hook).chmod(0o755)
    (repo / ".gitattributes").write_text("* filter=evil diff=evil text eol=crlf ident working-tree-encoding=UTF-16\n")
    (repo / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    (repo / "ident.txt").write_text("$Id$\nlf only\n")
    nested = repo / "sub"
    nested.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=nested, check=True)
    with open(nested / ".git" / "config", "a") as handle:
        handle.write(_evil_config(canary, "nested"))
    (nested / "inner.txt").write_text("inner\n")
    return repo


BASH = (
    "printf 'three\\r\\n' >> crlf.txt && printf 'changed $Id$\\n' > ident.txt && "
    "printf x > '-rf' && printf y > ':(exclude)x' && printf z > \"$(printf 'new\\nline')\" && "
    "printf w > '#hash' && printf v > '!bang' && echo more >> sub/inner.txt"
)


def test_hostile_workspace_and_environment_run_nothing(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    canary.mkdir()
    repo = _hostile_repo(tmp_path, canary)
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".gitconfig").write_text(_evil_config(canary, "home"))
    (home / ".config" / "git" / "config").write_text(_evil_config(canary, "xdg"))
    (home / ".config" / "git" / "attributes").write_text("* filter=evil\n")
    global_config = tmp_path / "global.gitconfig"
    global_config.write_text(_evil_config(canary, "global"))
    hostile_env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "GIT_CONFIG_GLOBAL": str(global_config),
        "GIT_CONFIG_SYSTEM": str(global_config),
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "filter.evil.clean",
        "GIT_CONFIG_VALUE_0": f"touch {canary}/env-count; cat",
        "GIT_CONFIG_PARAMETERS": f"'core.fsmonitor'='touch {canary}/env-params'",
        "GIT_EXTERNAL_DIFF": f"{canary}/../evil-extdiff",
        "GIT_PAGER": f"touch {canary}/env-pager",
        "GIT_DIR": str(repo / ".git"),
        "GIT_INDEX_FILE": str(repo / ".git" / "index"),
        "GIT_WORK_TREE": str(tmp_path),
        **NO_PROXY,
    }
    (tmp_path / "evil-extdiff").write_text(f"#!/bin/sh\ntouch {canary}/env-extdiff\n")
    (tmp_path / "evil-extdiff").chmod(0o755)
    before, git_before = tree_state(repo, skip=(".git",)), git_state(repo)
    with SSEServer() as server:
        server.push(call(1, "bash", {"command": BASH, "description": "hostile names"}), text("done"))
        chat = run_dsh(["chat", "--base-url", server.base_url, "--model", "test-model"], repo,
                       stdin="go\n", timeout=120, **hostile_env)
    assert chat.returncode == 0, chat.stderr
    assert (repo / "-rf").exists() and (repo / "new\nline").exists()  # the step did run
    [log] = session_files(repo)
    sid = session_id_of(log)
    diff = run_dsh(["sessions", "diff", sid], repo, **hostile_env)
    assert diff.returncode == 0, diff.stderr
    assert "+three" in diff.stdout and "-rf" in diff.stdout and "Subproject commit" not in diff.stdout
    back = run_dsh(["sessions", "rewind", sid, "--to-turn", "1"], repo, **hostile_env)
    assert back.returncode == 0, back.stderr
    assert sorted(os.listdir(canary)) == []
    after = tree_state(repo, skip=(".git", "sub"))
    assert after == {k: v for k, v in before.items() if not k.startswith("sub")}
    # A nested repository is not snapshotted (README): the agent's change there stays.
    assert (repo / "sub" / "inner.txt").read_text() == "inner\nmore\n"
    assert (repo / "crlf.txt").read_bytes() == b"one\r\ntwo\r\n"
    assert (repo / "ident.txt").read_bytes() == b"$Id$\nlf only\n"
    assert git_state(repo) == git_before
