"""``dsh run`` doing a task that needs an MCP tool of ``.mcp.json`` (it asks by default) and
``bash`` under ``danger-full-access`` (it asks too): refused without rules (no one can answer),
done with ``--allow``; ``--deny`` wins; a command smuggled past a prefix rule is not allowed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apps.conftest import run_dsh
from tests.llm.sse_server import SSEServer
from tests.permissions.support import PYTEST, SEARCH, Project
from tests.tools.workspace.cli_support import calls, done

pytestmark = pytest.mark.slow

UNAVAILABLE = (
    'Error: approval unavailable: "{}" requires approval and no one can answer (no interactive '
    "answerer); the call was not run"
)
REJECTED = 'Error: approval rejected: the "{}" call was not run (rejected by the user or by the approval policy)'
ALLOW = ("--allow", "mcp__calc__*", "--allow", "bash(python -m pytest:*)")


@pytest.fixture
def project(tmp_path: Path, sse_server: SSEServer) -> Project:
    return Project(tmp_path, sse_server)


def test_refused_without_rules(project: Project) -> None:
    result = project.run()
    assert result.returncode == 0, result.stderr
    assert project.results() == [
        (SEARCH, UNAVAILABLE.format(SEARCH), True),
        ("bash", UNAVAILABLE.format("bash"), True),
    ]
    assert [d["outcome"] for d in project.decisions()] == ["unavailable", "unavailable"]


def test_done_with_allow_flags_and_the_rule_is_in_the_log(project: Project) -> None:
    result = project.run(*ALLOW)
    assert result.returncode == 0, result.stderr
    (search, found, search_error), (bash, output, bash_error) = project.results()
    assert (search, found, search_error) == (SEARCH, "calc found two plus two", False)
    assert bash == "bash" and not bash_error and "pytest" in output and "approval" not in output
    decided = project.decisions()
    assert [(d["outcome"], d["by"], d["rule"], d["source"]) for d in decided] == [
        ("allowed-once", "rule", "mcp__calc__*", "--allow"),
        ("allowed-once", "rule", "Bash(python -m pytest:*)", "--allow"),
    ]
    # sessions show prints each decision, with its rule and source, beside its call
    lines = project.show().splitlines()
    call = next(i for i, line in enumerate(lines) if f"bash  $ {PYTEST}" in line)
    assert lines[call + 1].endswith("approval   bash: allowed-once by rule Bash(python -m pytest:*) (--allow)")
    assert any(line.endswith(f"approval   {SEARCH}: allowed-once by rule mcp__calc__* (--allow)") for line in lines)


def test_deny_wins_over_allow(project: Project) -> None:
    result = project.run(*ALLOW, "--deny", "mcp__calc__search", "--deny", "Bash(python -m pytest:*)")
    assert result.returncode == 0, result.stderr
    assert project.results() == [(SEARCH, REJECTED.format(SEARCH), True), ("bash", REJECTED.format("bash"), True)]
    assert [(d["outcome"], d["by"], d["rule"], d["source"]) for d in project.decisions()] == [
        ("rejected", "rule", "mcp__calc__search", "--deny"),
        ("rejected", "rule", "Bash(python -m pytest:*)", "--deny"),
    ]


@pytest.mark.attack
def test_a_smuggled_second_command_is_not_allowed_by_a_prefix_rule(project: Project) -> None:
    pwned = project.cwd / "pwned"
    smuggled = (f"{PYTEST}; touch {pwned}", f"{PYTEST} && touch {pwned}", f"{PYTEST} $(touch {pwned})",
                f"{PYTEST}\ntouch {pwned}", f"{PYTEST} | sh -c 'touch {pwned}'")
    result = project.run(*ALLOW, commands=smuggled, mcp=False)
    assert result.returncode == 0, result.stderr
    assert project.results() == [("bash", UNAVAILABLE.format("bash"), True)] * len(smuggled)
    assert not pwned.exists()


def test_a_deny_rule_refuses_a_tool_that_never_asks(project: Project, tmp_path: Path) -> None:
    home = tmp_path / "userhome"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SECRET-KEY\n")
    (project.cwd / "notes.txt").write_text("fine\n")
    project.env["HOME"] = str(home)
    project.server.push(
        calls(("read", {"file_path": str(home / ".ssh" / "id_rsa")}), ("read", {"file_path": "notes.txt"})), done()
    )
    result = run_dsh(["run", "read", "--base-url", f"{project.server.base_url}/v1", "--model", "m",
                      "--deny", "read(~/.ssh/**)"], project.cwd, **project.env)
    assert result.returncode == 0, result.stderr
    (_, secret, secret_error), (_, notes, _) = project.results()
    assert (secret, secret_error) == (REJECTED.format("read"), True)
    assert "fine" in notes
    assert "SECRET-KEY" not in json.dumps(project.events()) and "SECRET-KEY" not in json.dumps(
        [r.json for r in project.server.requests]
    )


@pytest.mark.attack
def test_project_rules_only_from_a_file_that_is_the_users_alone(project: Project) -> None:
    stored = project.home / "permissions.json"
    stored.write_text(json.dumps({"version": 1, "projects": {str(project.cwd): {"allow": [f"Bash({PYTEST})"]}}}))
    stored.chmod(0o666)  # another local user could have written it
    result = project.run(mcp=False)
    assert result.returncode == 0, result.stderr
    assert project.results() == [("bash", UNAVAILABLE.format("bash"), True)]
    assert f"dsh: {stored} is writable by another user; it grants nothing (chmod 600)" in result.stderr.splitlines()
    stored.chmod(0o600)
    result = project.run(mcp=False)
    assert result.returncode == 0, result.stderr
    [decided] = project.decisions()
    assert (decided["by"], decided["rule"], decided["source"]) == (
        "rule", f"Bash({PYTEST})", f"always allow in this project ({stored})"
    )


def test_allow_rules_apply_under_approval_never(project: Project) -> None:
    result = project.run("--approval", "never", "--allow", "mcp__calc")
    assert result.returncode == 0, result.stderr
    (_, found, _), (_, refused, _) = project.results()
    assert found == "calc found two plus two"  # mcp__calc: every tool of the server
    assert refused == REJECTED.format("bash")  # no rule: never rejects, as before
