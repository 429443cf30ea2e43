"""The hostile ``.mcp.json`` as a plain user: run as root, the test creates a user (``useradd``)
and runs ``dsh run`` and ``dsh mcp list`` through ``setpriv``; run as a plain user already, it
runs them directly. The trust file that user writes is 0600 and theirs."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apps.conftest import dsh_env
from tests.trust.conftest import Hostile

pytestmark = [pytest.mark.attack, pytest.mark.slow]

USER = "dshtrust"


def _as_user() -> list[str]:
    """The prefix that runs a command as a plain user (empty when we are one)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed, so root cannot run dsh as a plain user here")
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
        entry = pwd.getpwnam(USER)
    prefix = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import dsh"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"a plain user cannot run this machine's Python ({sys.executable}): {probe.stderr.strip()[-200:]}")
    return prefix


@pytest.fixture
def own_folder() -> Iterator[Path]:
    # pytest's tmp_path sits under a 0700 root folder a plain user cannot traverse.
    folder = Path(tempfile.mkdtemp(prefix="dsh-trust-user-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_hostile_mcp_json_as_a_plain_user(own_folder: Path) -> None:
    prefix = _as_user()
    hostile = Hostile(own_folder)
    if prefix:
        uid, gid = int(prefix[1].split("=")[1]), int(prefix[2].split("=")[1])
        for path in [own_folder, *own_folder.rglob("*")]:
            os.chown(path, uid, gid)

    def dsh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*prefix, sys.executable, "-m", "dsh", *args], capture_output=True, text=True,
            cwd=hostile.project, env=dsh_env(**hostile.env), timeout=120,
        )

    for args in (["run", "hello"], ["mcp", "list"]):
        result = dsh(*args)
        assert not hostile.marker.exists()
        hostile.assert_key_nowhere(result.stdout, result.stderr)
        assert result.returncode == 0, result.stderr
        assert result.stderr.splitlines() == [hostile.line()]
    trusted = dsh("trust", "--yes")
    assert trusted.returncode == 0, trusted.stderr
    info = (hostile.home / "trust.json").stat()
    assert info.st_mode & 0o777 == 0o600 and info.st_uid == (int(prefix[1].split("=")[1]) if prefix else os.geteuid())
