"""The permission attacks as a plain user (root creates one and runs ``dsh run`` through
``setpriv``; a plain user runs them directly): a command smuggled past a prefix rule does not
run, and an "always allow in this project" file another user wrote grants nothing."""

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
from tests.tools.workspace.cli_support import NO_PROXY, calls, done
from tests.trust.test_plain_user import _as_user

pytestmark = [pytest.mark.attack, pytest.mark.slow]


@pytest.fixture
def own_folder() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="dsh-perms-user-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_smuggling_and_a_foreign_project_rules_file_as_a_plain_user(own_folder: Path) -> None:
    prefix = _as_user()
    home, project = own_folder / "home", own_folder / "project"
    home.mkdir()
    project.mkdir()
    pwned = own_folder / "pwned"
    if prefix:
        uid, gid = int(prefix[1].split("=")[1]), int(prefix[2].split("=")[1])
        for path in (own_folder, home, project):
            os.chown(path, uid, gid)
    # Written by another user (root here; when run as a plain user, a file not 0600 is refused too).
    foreign = home / "permissions.json"
    foreign.write_text(json.dumps({"version": 1, "projects": {str(project): {"allow": [f"Bash(touch {pwned})"]}}}))
    foreign.chmod(0o644 if prefix else 0o666)
    commands = [f"echo ok; touch {pwned}", f"echo ok && touch {pwned}", f"echo ok $(touch {pwned})", f"touch {pwned}"]
    with SSEServer() as server:
        server.push(calls(*[("bash", {"command": c, "description": "x"}) for c in commands]), done())
        result = subprocess.run(
            [*prefix, sys.executable, "-m", "dsh", "run", "go", "--base-url", server.base_url, "--model", "m",
             "--sandbox", "danger-full-access", "--allow", "bash(echo ok:*)"],
            capture_output=True, text=True, cwd=project, timeout=120,
            env=dsh_env(DSH_HOME=str(home), **NO_PROXY),
        )
    assert result.returncode == 0, result.stderr
    assert not pwned.exists()
    assert f"dsh: {foreign}" in result.stderr and "it grants nothing" in result.stderr
