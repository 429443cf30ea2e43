"""``dsh mcp list`` and ``dsh chat`` with MCP configuration but no server to start (fast)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apps.conftest import run_dsh
from tests.mcp.conftest import trust_project


@pytest.mark.slow
def test_mcp_list_without_servers(workdir: Path, tmp_path: Path) -> None:
    result = run_dsh(["mcp", "list"], workdir, DSH_HOME=str(tmp_path / "home"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("no MCP servers configured")
    as_json = run_dsh(["mcp", "list", "--json"], workdir, DSH_HOME=str(tmp_path / "home"))
    assert json.loads(as_json.stdout) == []


def test_mcp_list_with_a_missing_config_file(workdir: Path) -> None:
    result = run_dsh(["mcp", "list", "--config", "nope.yml"], workdir)
    assert result.returncode == 2
    assert result.stderr.startswith("dsh: nope.yml: cannot read")
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_broken_mcp_json_stops_chat_with_one_line(workdir: Path, tmp_path: Path) -> None:
    (workdir / ".mcp.json").write_text('{"mcpServers": {"s": {"command": "x", "env": {"T": "${UNSET_MCP_VAR}"}}}}')
    trust_project(workdir, tmp_path / "home")
    result = run_dsh(["chat"], workdir, stdin="hi\n", DSH_HOME=str(tmp_path / "home"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f'dsh: plugin "mcp": mcp: {workdir}/.mcp.json: server "s": env.T: '
        "environment variable UNSET_MCP_VAR is not set"
    )
    (workdir / ".mcp.json").write_text("{not json")
    broken = run_dsh(["chat"], workdir, stdin="hi\n", DSH_HOME=str(tmp_path / "home"))
    assert broken.returncode == 2
    assert f"{workdir}/.mcp.json: line 1: invalid JSON" in broken.stderr


@pytest.mark.slow
def test_a_user_level_file_is_discovered(workdir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "mcp.json").write_text(json.dumps({"mcpServers": {"gone": {"command": "/nonexistent/srv"}}}))
    result = run_dsh(["mcp", "list"], workdir, DSH_HOME=str(home))
    assert result.returncode == 1
    assert f"gone  stdio  failed: command not found: /nonexistent/srv  (ask, {home}/mcp.json)" in result.stdout


@pytest.mark.slow
def test_a_server_that_never_answers_fails_at_its_startup_timeout(workdir: Path, tmp_path: Path) -> None:
    (workdir / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"mute": {"command": "sleep", "args": ["600"], "startupTimeoutMs": 1000}}})
    )
    trust_project(workdir, tmp_path / "home")
    result = run_dsh(["mcp", "list"], workdir, timeout=120, DSH_HOME=str(tmp_path / "home"))
    assert result.returncode == 1
    assert "mute  stdio  failed: no answer to initialize and tools/list within 1s" in result.stdout
    assert 'dsh: mcp: server "mute" failed to start: no answer to initialize and tools/list within 1s' in result.stderr
