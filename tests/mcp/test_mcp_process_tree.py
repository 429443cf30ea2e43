"""No process an MCP stdio server started outlives dsh: a ``setsid`` child and a double-forked
daemon (both outside the server's process group) are gone after ``dsh mcp list`` and
``dsh run`` exit, and after dsh itself is killed with SIGKILL."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.apps.conftest import Interactive, run_dsh
from tests.mcp.conftest import alive, pids, stdio_server, wait_for, write_mcp_json

pytestmark = [pytest.mark.attack, pytest.mark.slow]


def _project(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    project = tmp_path / "project"
    project.mkdir()
    spawned = tmp_path / "spawned.pids"
    write_mcp_json(
        project, {"alpha": stdio_server("alpha", tmp_path, env={"MCP_SPAWN": str(spawned)})},
        trusted_in=tmp_path / "home",
    )
    return project, spawned, {"DSH_HOME": str(tmp_path / "home")}


def _escapees(spawned: Path) -> list[int]:
    return [pid for pair in pids(spawned) for pid in pair]


@pytest.mark.parametrize("args", [["mcp", "list"], ["run", "hello"]], ids=["mcp-list", "run"])
def test_escaped_children_die_when_dsh_exits(tmp_path: Path, args: list[str]) -> None:
    project, spawned, env = _project(tmp_path)
    result = run_dsh(args, project, timeout=240, **env)
    assert result.returncode == 0, result.stderr
    escapees = _escapees(spawned)
    assert len(escapees) == 2
    wait_for(lambda: not any(alive(p) for p in escapees), 10, "the setsid child and the daemon to die")


@pytest.mark.sigkill
def test_escaped_children_die_when_dsh_is_killed(tmp_path: Path) -> None:
    project, spawned, env = _project(tmp_path)
    chat = Interactive(["chat"], project, **env)
    try:
        chat.read_until("> ", timeout=180)
        escapees = _escapees(spawned)
        assert len(escapees) == 2 and all(alive(p) for p in escapees)
        chat.proc.kill()
        chat.proc.wait(timeout=10)
    finally:
        if chat.proc.poll() is None:
            chat.proc.kill()
    wait_for(lambda: not any(alive(p) for p in escapees), 10, "the setsid child and the daemon to die")
