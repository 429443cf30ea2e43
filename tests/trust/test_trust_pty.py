"""The questions on a real terminal: ``dsh trust`` asks before it records anything, and
terminal-mode ``dsh chat`` offers each untrusted project file at start (``n``: skipped for this
run, nothing starts; ``y``: trusted, and its server starts)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from tests.apps.pty_screen import Terminal
from tests.mcp.conftest import SERVER, pids, wait_for, write_mcp_json
from tests.trust.conftest import KEY, Hostile

pytestmark = pytest.mark.pty


def test_dsh_trust_asks_on_the_terminal(hostile: Hostile) -> None:
    term = Terminal(["trust"], hostile.project, **hostile.env)
    screen = term.expect("Trust these project files? [y/N]")
    assert shlex.join(hostile.argv) in screen.replace("\n", "")
    term.type("n\r")
    assert term.wait() == 1
    assert "nothing trusted" in term.text()
    assert not (hostile.home / "trust.json").exists()

    term = Terminal(["trust"], hostile.project, **hostile.env)
    term.expect("Trust these project files? [y/N]")
    term.type("y\r")
    assert term.wait() == 0
    assert f"trusted {hostile.file}" in term.text()
    assert json.loads((hostile.home / "trust.json").read_text())["files"][0]["path"] == str(hostile.file)
    assert not hostile.marker.exists()


def test_chat_offers_an_untrusted_file_and_no_skips_it(hostile: Hostile) -> None:
    term = Terminal(["chat"], hostile.project, **hostile.env)
    screen = term.expect("Trust this file and start what it runs? [y/N]")
    assert f"{hostile.file} (not trusted: new) would run:" in screen
    assert shlex.join(hostile.argv) in screen.replace("\n", "")
    term.type("n\r")
    term.expect("skipped for this run")
    term.expect("Ctrl-D to leave")
    term.type("\x04")
    assert term.wait() == 0
    screen = term.text()
    assert "is not trusted (new)" not in screen  # declined: no second line about it
    assert KEY not in screen
    assert not hostile.marker.exists()
    assert not (hostile.home / "trust.json").exists()


def test_chat_offer_yes_trusts_and_starts_the_server(tmp_path: Path) -> None:
    project = (tmp_path / "project").resolve()
    project.mkdir()
    pidfile = tmp_path / "alpha.pids"
    write_mcp_json(project, {"alpha": {
        "command": sys.executable, "args": [str(SERVER)], "startupTimeoutMs": 180_000,
        "env": {"MCP_TAG": "alpha", "MCP_PIDFILE": str(pidfile)},
    }})
    term = Terminal(["chat"], project, DSH_HOME=str(tmp_path / "home"))
    term.expect("Trust this file and start what it runs? [y/N]")
    term.type("y\r")
    term.expect("Ctrl-D to leave", timeout=180)
    assert len(pids(pidfile)) == 1
    term.type("\x04")
    assert term.wait() == 0
    wait_for(lambda: (tmp_path / "home" / "trust.json").exists(), 5, "the trust file")
