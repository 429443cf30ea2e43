"""Rules from the settings files through ``dsh run``: the user's ``$DSH_HOME/settings.json``
applies at once; a project's ``.dsh/settings.json`` only once the user trusts it, and never
over a user deny; an ask rule asks (refused where no one can answer); a bad rule is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apps.conftest import run_dsh
from tests.llm.sse_server import SSEServer
from tests.permissions.support import PYTEST, SEARCH, Project
from tests.permissions.test_rules_cli import REJECTED, UNAVAILABLE
from tests.tools.workspace.cli_support import calls, done

pytestmark = pytest.mark.slow

ALLOW = {"allow": ["mcp__calc__*", "bash(python -m pytest:*)"]}


@pytest.fixture
def project(tmp_path: Path, sse_server: SSEServer) -> Project:
    return Project(tmp_path, sse_server)


def _settings(path: Path, permissions: dict[str, list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"permissions": permissions, "model": "ignored"}))
    return path


def test_user_settings_rules_apply(project: Project) -> None:
    user = _settings(project.home / "settings.json", ALLOW)
    result = project.run()
    assert result.returncode == 0, result.stderr
    (_, found, _), (_, output, error) = project.results()
    assert found == "calc found two plus two" and not error and "pytest" in output
    assert [(d["by"], d["rule"], d["source"]) for d in project.decisions()] == [
        ("rule", "mcp__calc__*", f"user settings {user}"),
        ("rule", "Bash(python -m pytest:*)", f"user settings {user}"),
    ]


@pytest.mark.attack
def test_project_settings_need_trust_and_never_override_a_user_deny(project: Project) -> None:
    local = _settings(project.cwd / ".dsh" / "settings.json", ALLOW)
    result = project.run()
    assert result.returncode == 0, result.stderr
    assert project.results() == [(SEARCH, UNAVAILABLE.format(SEARCH), True), ("bash", UNAVAILABLE.format("bash"), True)]
    assert any(line.startswith(f"dsh: {local} is not trusted (new)") for line in result.stderr.splitlines())

    trusted = run_dsh(["trust", "--yes"], project.cwd, **project.env)
    assert trusted.returncode == 0, trusted.stderr
    result = project.run()
    assert result.returncode == 0, result.stderr
    assert [(d["outcome"], d["source"]) for d in project.decisions()] == [
        ("allowed-once", f"project settings {local}"), ("allowed-once", f"project settings {local}"),
    ]

    user = _settings(project.home / "settings.json", {"deny": ["bash(python:*)"]})
    result = project.run()
    assert result.returncode == 0, result.stderr
    assert project.results()[1] == ("bash", REJECTED.format("bash"), True)
    assert project.decisions()[1]["source"] == f"user settings {user}"


def test_an_ask_rule_asks_for_a_tool_that_never_does(project: Project) -> None:
    _settings(project.home / "settings.json", {"ask": ["read(secret.txt)"]})
    (project.cwd / "secret.txt").write_text("s3cret\n")
    project.server.push(calls(("read", {"file_path": "secret.txt"})), done())
    result = run_dsh(["run", "read", "--base-url", f"{project.server.base_url}/v1", "--model", "m"],
                     project.cwd, **project.env)
    assert result.returncode == 0, result.stderr
    assert project.results() == [("read", UNAVAILABLE.format("read"), True)]


def test_a_bad_rule_in_a_settings_file_is_one_line(project: Project) -> None:
    user = _settings(project.home / "settings.json", {"deny": ["bash(rm"]})
    result = run_dsh(["run", "hi"], project.cwd, **project.env)
    assert result.returncode == 2
    assert result.stderr.strip().endswith(f'user settings {user}: deny rule "bash(rm" is missing its closing ")"')
    assert PYTEST  # the shared project (unused here)
