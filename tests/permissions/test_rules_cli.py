"""``dsh run`` doing a task that needs an MCP tool of ``.mcp.json`` (it asks by default) and
``bash`` under ``danger-full-access`` (it asks too): refused without rules (no one can answer),
done with ``--allow``; ``--deny`` wins; a command smuggled past a prefix rule is not allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.llm.sse_server import SSEServer
from tests.permissions.support import PYTEST, SEARCH, Project

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


def test_a_smuggled_second_command_is_not_allowed_by_a_prefix_rule(project: Project) -> None:
    pwned = project.cwd / "pwned"
    smuggled = (f"{PYTEST}; touch {pwned}", f"{PYTEST} && touch {pwned}", f"{PYTEST} $(touch {pwned})",
                f"{PYTEST}\ntouch {pwned}", f"{PYTEST} | sh -c 'touch {pwned}'")
    result = project.run(*ALLOW, commands=smuggled, mcp=False)
    assert result.returncode == 0, result.stderr
    assert project.results() == [("bash", UNAVAILABLE.format("bash"), True)] * len(smuggled)
    assert not pwned.exists()
