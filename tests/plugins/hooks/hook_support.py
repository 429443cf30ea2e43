"""Helpers for the hooks tests: a project folder with a Claude Code settings file, trusted or
not, and the real ``dsh chat`` driven by a scripted model on loopback."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.apps.conftest import run_dsh, session_files

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def project(tmp_path: Path, hooks: dict[str, Any], *, name: str = ".claude/settings.json") -> Path:
    """A git project whose settings file ``name`` holds ``hooks``."""
    cwd = tmp_path / "project"
    cwd.mkdir(exist_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=cwd, check=True)
    path = cwd / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hooks": hooks}, indent=2))
    return cwd


def env(tmp_path: Path) -> dict[str, str]:
    """A private dsh home (trust file, sessions) and Claude Code folder for one test."""
    home = tmp_path / "dsh-home"
    claude = tmp_path / "claude-home"
    home.mkdir(exist_ok=True)
    claude.mkdir(exist_ok=True)
    return {"DSH_HOME": str(home), "CLAUDE_CONFIG_DIR": str(claude), **NO_PROXY}


def trust(cwd: Path, environ: dict[str, str]) -> None:
    result = run_dsh(["trust", "--yes"], cwd, **environ)
    assert result.returncode == 0, result.stderr


def chat(cwd: Path, base_url: str, environ: dict[str, str], stdin: str = "go\n", *extra: str) -> subprocess.CompletedProcess[str]:
    return run_dsh(
        ["chat", "--base-url", base_url, "--model", "test-model", *extra], cwd, stdin=stdin, timeout=120, **environ
    )


def events(cwd: Path, environ: dict[str, str]) -> list[dict[str, Any]]:
    [log] = session_files(cwd, Path(environ["DSH_HOME"]) / "sessions")
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


def command_hook(command: str, matcher: str | None = None, timeout: float | None = None) -> dict[str, Any]:
    hook: dict[str, Any] = {"type": "command", "command": command}
    if timeout is not None:
        hook["timeout"] = timeout
    group: dict[str, Any] = {"hooks": [hook]}
    if matcher is not None:
        group["matcher"] = matcher
    return group
