"""The two named modes through ``dsh run``: ``--dangerously-skip-approvals`` (unconfined, nothing
asked, one warning line, deny rules still refuse) and ``--full-auto`` (the workspace-write
sandbox; what runs inside it is not asked, anything else is asked or refused as without it);
contradictory combinations are one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.apps.permission_flags import SKIP_WARNING
from tests.apps.conftest import run_dsh
from tests.llm.sse_server import SSEServer
from tests.permissions.support import SEARCH, Project
from tests.permissions.test_rules_cli import REJECTED, UNAVAILABLE


@pytest.fixture
def project(tmp_path: Path, sse_server: SSEServer) -> Project:
    return Project(tmp_path, sse_server)


@pytest.mark.slow
def test_skip_approvals_asks_nothing_but_deny_still_refuses(project: Project) -> None:
    outside = project.cwd.parent / "outside.txt"
    result = project.run("--dangerously-skip-approvals", "--deny", "bash(rm:*)", sandbox=(),
                         commands=(f"echo hi > {outside}", "rm -f nothing"))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == SKIP_WARNING
    (_, found, _), (_, _, wrote_error), (_, removed, _) = project.results()
    assert found == "calc found two plus two" and not wrote_error
    assert outside.read_text() == "hi\n"  # unconfined: outside the workspace
    assert removed == REJECTED.format("bash")
    assert [(d["outcome"], d["by"], d.get("source")) for d in project.decisions()] == [
        ("allowed-once", "mode", "--dangerously-skip-approvals"),
        ("allowed-once", "mode", "--dangerously-skip-approvals"),
        ("rejected", "rule", "--deny"),
    ]


@pytest.mark.slow
def test_full_auto_runs_sandboxed_commands_and_still_refuses_the_rest(project: Project) -> None:
    outside = project.cwd.parent / "outside.txt"
    result = project.run("--full-auto", sandbox=(), commands=("echo in > inside.txt", f"echo out > {outside}"))
    assert result.returncode == 0, result.stderr
    (_, refused, _), (_, _, inside_error), (_, out, _) = project.results()
    assert refused == UNAVAILABLE.format(SEARCH)  # MCP is not inside the sandbox: asked as before
    assert not inside_error and (project.cwd / "inside.txt").read_text() == "in\n"
    assert not outside.exists() and "Read-only file system" in out
    assert [d["outcome"] for d in project.decisions()] == ["unavailable"]


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--full-auto", "--dangerously-skip-approvals"],
         "dsh: --full-auto and --dangerously-skip-approvals cannot be combined (pick one)"),
        (["--full-auto", "--sandbox", "read-only"],
         "dsh: --full-auto uses the workspace-write sandbox; it cannot be combined with --sandbox read-only"),
        (["--dangerously-skip-approvals", "--sandbox", "workspace-write"],
         "dsh: --dangerously-skip-approvals runs unconfined; it cannot be combined with --sandbox workspace-write"),
        (["--dangerously-skip-approvals", "--approval", "never"],
         "dsh: --dangerously-skip-approvals allows what asks; it cannot be combined with --approval never"),
        (["--allow", "bash(npm test"], 'dsh: --allow: allow rule "bash(npm test" is missing its closing ")"'),
        (["--deny", "Frob(x)"], 'dsh: --deny: deny rule "Frob(x)": only Bash, Edit, Write and Read rules take a specifier'),
    ],
)
def test_contradictions_are_one_line(tmp_path: Path, flags: list[str], line: str) -> None:
    result = run_dsh(["run", "hi", *flags], tmp_path, DSH_HOME=str(tmp_path / "home"))
    assert (result.returncode, result.stderr.strip(), result.stdout) == (2, line, "")


@pytest.mark.parametrize(
    "argv", [["chat", "--plain"], ["acp"], ["reminders", "run", "--once"]], ids=["chat", "acp", "reminders"]
)
def test_every_command_takes_the_flags(tmp_path: Path, argv: list[str]) -> None:
    flags = ["--full-auto", "--dangerously-skip-approvals"]
    result = run_dsh([*argv, *flags], tmp_path, DSH_HOME=str(tmp_path / "home"))
    want = "dsh: --full-auto and --dangerously-skip-approvals cannot be combined (pick one)"
    assert (result.returncode, result.stderr.strip(), result.stdout) == (2, want, "")
    bad = run_dsh([*argv, "--deny", "bash(x"], tmp_path, DSH_HOME=str(tmp_path / "home"))
    assert (bad.returncode, bad.stderr.strip()) == (2, 'dsh: --deny: deny rule "bash(x" is missing its closing ")"')
