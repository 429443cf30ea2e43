"""The pieces under the hooks plugin: matchers and the tool-name table, the exit-code/stdout
contract, and the settings loader's typed sections and trust."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsh.plugins.hooks.config import matches, names_of
from dsh.plugins.hooks.runner import RunOutcome, parse_output
from dsh.runtime.config import ConfigError
from dsh.settings import load_settings


@pytest.mark.parametrize(
    ("matcher", "tool", "hit"),
    [
        ("Bash", "bash", True),
        ("bash", "bash", True),
        ("Edit|Write", "write", True),
        ("Edit|Write", "edit", True),
        ("Edit|Write", "read", False),
        ("MultiEdit", "edit", True),
        ("Notebook.*", "edit", False),
        ("mcp__github__.*", "mcp__github__search", True),
        ("*", "glob", True),
        ("", "grep", True),
        (None, "todo_write", True),
        ("TodoWrite", "todo_write", True),
        ("Bash", "bash_like", False),
    ],
)
def test_matchers_take_claude_code_and_dsh_names(matcher: str | None, tool: str, hit: bool) -> None:
    assert matches(matcher, names_of(tool)) is hit


def _run(code: int | None, out: str = "", err: str = "") -> RunOutcome:
    return RunOutcome(code, out, err, 1)


def test_exit_2_blocks_with_stderr_as_the_reason() -> None:
    assert parse_output("PreToolUse", _run(2, "ignored", " no rm \n")).decision == "block"
    assert parse_output("PreToolUse", _run(2, "", "no rm")).reason == "no rm"


def test_other_exit_codes_decide_nothing() -> None:
    assert parse_output("PreToolUse", _run(1, '{"decision": "block"}', "oops")).decision is None


def test_json_output_fields() -> None:
    out = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask", "permissionDecisionReason": "why"}}
    parsed = parse_output("PreToolUse", _run(0, json.dumps(out)))
    assert (parsed.decision, parsed.reason) == ("ask", "why")
    other = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "permissionDecision": "deny"}}
    assert parse_output("PreToolUse", _run(0, json.dumps(other))).decision is None  # another event's block
    legacy = parse_output("Stop", _run(0, '{"decision": "block", "reason": "go on"}'))
    assert (legacy.decision, legacy.reason) == ("block", "go on")
    assert parse_output("PreToolUse", _run(0, '{"decision": "approve"}')).decision == "allow"
    assert parse_output("Stop", _run(0, '{"continue": false}')).stop


def test_plain_stdout_is_context_only_for_prompt_and_session_start() -> None:
    assert parse_output("UserPromptSubmit", _run(0, "be brief\n")).additional_context == "be brief"
    assert parse_output("SessionStart", _run(0, "branch main")).additional_context == "branch main"
    assert parse_output("PostToolUse", _run(0, "formatted")).additional_context is None


def _settings(folder: Path, name: str, data: object) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_settings_sections_with_source_and_trust(tmp_path: Path) -> None:
    home, claude, cwd = tmp_path / "home", tmp_path / "claude", tmp_path / "p"
    environ = {"DSH_HOME": str(home), "CLAUDE_CONFIG_DIR": str(claude)}
    hooks = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}}
    _settings(home, "settings.json", hooks)
    _settings(claude, "settings.json", {**hooks, "model": "opus", "permissions": {"allow": ["Bash"]}})
    _settings(cwd, ".dsh/settings.local.json", hooks)
    _settings(cwd, ".claude/settings.json", {"theme": "dark"})  # no section dsh reads: ignored
    found = load_settings(cwd, environ=environ, check_trust=False)
    entries = found.section("hooks", include_untrusted=True)
    assert [(e.scope, e.origin, e.trusted, e.file.name) for e in entries] == [
        ("user", "dsh", True, "settings.json"),
        ("user", "claude", True, "settings.json"),
        ("project", "dsh", False, "settings.local.json"),
    ]
    assert len(found.section("hooks")) == 2  # the untrusted project file is not in force
    _settings(cwd, ".dsh/settings.local.json", {"hooks": {}})  # empty: nothing to trust
    assert [e.scope for e in load_settings(cwd, environ=environ).section("hooks", include_untrusted=True)] == ["user", "user"]


def test_settings_errors_are_one_line(tmp_path: Path) -> None:
    environ = {"DSH_HOME": str(tmp_path / "h"), "CLAUDE_CONFIG_DIR": str(tmp_path / "c")}
    path = _settings(tmp_path, ".claude/settings.json", {})
    path.write_text("{\n  nope")
    with pytest.raises(ConfigError, match=r"settings.json: line 2: invalid JSON \(Expecting property name"):
        load_settings(tmp_path, environ=environ)
    path.write_text('{"hooks": []}')
    with pytest.raises(ConfigError, match=r"Expected `object`, got `array` - at `\$.hooks`"):
        load_settings(tmp_path, environ=environ)
    path.write_bytes(b"{" + b" " * (1 << 20) + b"}")
    with pytest.raises(ConfigError, match="larger than 1 MiB"):
        load_settings(tmp_path, environ=environ)


def test_a_fifo_settings_file_is_refused_without_hanging(tmp_path: Path) -> None:
    import os

    (tmp_path / ".claude").mkdir()
    os.mkfifo(tmp_path / ".claude" / "settings.json")
    with pytest.raises(ConfigError, match=r"settings\.json: not a regular file"):
        load_settings(tmp_path, environ={"DSH_HOME": str(tmp_path / "h"), "CLAUDE_CONFIG_DIR": str(tmp_path / "c")})


def test_a_lone_surrogate_in_the_payload_stays_valid_json(tmp_path: Path) -> None:
    import asyncio
    import os

    from dsh.plugins.hooks.runner import run_command

    outcome = asyncio.run(
        run_command("cat", {"tool_input": {"file_path": "\ud800x"}}, cwd=str(tmp_path), env=dict(os.environ), timeout_s=10)
    )
    assert outcome.exit_code == 0
    assert json.loads(outcome.stdout) == {"tool_input": {"file_path": "\ud800x"}}
