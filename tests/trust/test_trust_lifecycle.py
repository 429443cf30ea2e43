"""``dsh trust``: after ``--yes`` the project's server starts, its ``${VAR}`` is expanded and its
``"approval": "trusted"`` honoured (a scripted model calls its tool through ``dsh run``); an
edit makes the file untrusted again; ``--list`` and ``--revoke`` work."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.apps.conftest import run_dsh
from tests.mcp.conftest import NO_PROXY, SERVER, TOKEN, pids, write_mcp_json
from tests.mcp.test_mcp_chat_e2e import calls, text, tool_messages

pytestmark = [pytest.mark.attack, pytest.mark.slow]


def test_trust_then_edit_then_revoke(sse_server: Any, tmp_path: Path) -> None:
    project = (tmp_path / "project").resolve()
    project.mkdir()
    home = tmp_path / "home"
    env = {"DSH_HOME": str(home), "MCP_TEST_TOKEN": TOKEN, **NO_PROXY}
    server = {
        "command": sys.executable, "args": [str(SERVER)], "startupTimeoutMs": 180_000, "approval": "trusted",
        "env": {"MCP_TAG": "alpha", "MCP_PIDFILE": str(tmp_path / "alpha.pids"), "TOKEN": "${MCP_TEST_TOKEN}"},
    }
    path = write_mcp_json(project, {"alpha": server})
    line = f"dsh: {path} is not trusted (%s); it would run: {sys.executable} {SERVER}; review and trust it with: dsh trust (in {project})"

    before = run_dsh(["mcp", "list"], project, **env)
    assert (before.returncode, before.stdout) == (0, f"alpha  stdio  untrusted  (ask, {path})\n")
    assert before.stderr.splitlines() == [line % "new"]

    trusted = run_dsh(["trust", "--yes"], project, **env)
    assert trusted.returncode == 0, trusted.stderr
    assert trusted.stdout.splitlines() == [
        f"{path} (new) would run:",
        f"  mcp server \"alpha\": env MCP_TAG=alpha MCP_PIDFILE={tmp_path / 'alpha.pids'} "
        f"'TOKEN=${{MCP_TEST_TOKEN}}' {sys.executable} {SERVER}",
        f"trusted {path}",
    ]
    record = json.loads((home / "trust.json").read_text())["files"][0]
    assert record["path"] == str(path) and record["folder"] == str(project)
    assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (home / "trust.json").stat().st_mode & 0o777 == 0o600

    # Trusted: the server starts, ${MCP_TEST_TOKEN} reaches it, and "trusted" skips approval
    # (dsh run cannot ask: a tool that needed approval would be refused).
    sse_server.push(calls(("c1", "mcp__alpha__check_token", {})), text("done"))
    ran = run_dsh(["run", "go", "--base-url", f"{sse_server.base_url}/v1", "--model", "m"], project, timeout=240, **env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr == ""
    assert tool_messages(sse_server.requests[1].json)["c1"] == "fingerprint " + hashlib.sha256(TOKEN.encode()).hexdigest()[:12]
    assert len(pids(tmp_path / "alpha.pids")) == 1

    listing = run_dsh(["trust", "--list"], project, **env)
    assert listing.returncode == 0
    assert listing.stdout.endswith(f"  trusted  mcp-servers  {path}\n")

    # An edit, even of whitespace, is a new file to trust.
    path.write_text(path.read_text() + "\n")
    changed = run_dsh(["mcp", "list"], project, **env)
    assert (changed.returncode, changed.stdout) == (0, f"alpha  stdio  untrusted  (ask, {path})\n")
    assert changed.stderr.splitlines() == [line % "changed"]
    assert "  changed  mcp-servers  " in run_dsh(["trust", "--list"], project, **env).stdout
    assert len(pids(tmp_path / "alpha.pids")) == 1

    again = run_dsh(["trust", "--yes"], project, **env)
    assert again.returncode == 0 and again.stdout.startswith(f"{path} (changed) would run:")
    assert run_dsh(["trust", "--yes"], project, **env).stdout == f"{path}: trusted\n"

    revoked = run_dsh(["trust", "--revoke", ".mcp.json"], project, **env)
    assert (revoked.returncode, revoked.stdout) == (0, f"revoked {path}\n")
    assert run_dsh(["mcp", "list"], project, **env).stderr.splitlines() == [line % "new"]
    nothing = run_dsh(["trust", "--revoke"], project, **env)
    assert nothing.returncode == 1
    assert nothing.stderr == f"dsh: nothing to revoke: no project file of {project} is trusted\n"
    assert run_dsh(["trust", "--list"], project, **env).stdout.startswith("no trusted project files")
