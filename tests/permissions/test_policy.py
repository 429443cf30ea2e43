"""Allow/ask/deny lists: the grammar's spellings (Claude Code's and dsh's tool names, MCP globs
and servers, workspace-relative paths) and the precedence (deny over ask over allow, whatever
the source), on the real parser and matcher."""

from __future__ import annotations

import pytest

from dsh.permissions import Rule, RuleError, parse_rule
from dsh.permissions.policy import RuleText, decide, from_permissions


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("bash(git status)", "Bash(git status)"),
        ("bash(npm run test:*)", "Bash(npm run test:*)"),
        ("write(src/**)", "Write(//ws/src/**)"),
        ("Edit(./docs/*.md)", "Edit(//ws/docs/*.md)"),
        ("read(//etc/passwd)", "Read(//etc/passwd)"),
        ("Grep", "grep"),
        ("TodoWrite", "todo_write"),
        ("mcp__github__*", "mcp__github__*"),
    ],
)
def test_both_spellings_parse_to_one_rule(text: str, canonical: str) -> None:
    assert str(parse_rule(text, base="/ws")) == canonical


def test_mcp_globs_and_servers() -> None:
    assert parse_rule("mcp__github__*").matches("mcp__github__create_issue")
    assert not parse_rule("mcp__github__*").matches("mcp__gitlab__create_issue")
    assert parse_rule("mcp__github").matches("mcp__github__x")
    assert not parse_rule("mcp__github").matches("mcp__githubber__x")
    assert parse_rule("mcp__*").matches("mcp__a__b") and not parse_rule("mcp__*").matches("bash")


def test_relative_paths_are_the_workspace_and_slash_paths_the_settings_folder() -> None:
    rule = RuleText("deny", "Read(/secrets/**)", "user settings", anchor="/home/me/.dsh").parse("/ws")
    assert rule == Rule("Read", "/home/me/.dsh/secrets/**")
    assert RuleText("allow", "write(src/**)", "--allow").parse("/ws").matches("write", "/ws/src/a/b.py")
    assert not RuleText("allow", "write(src/**)", "--allow").parse("/ws").matches("write", "/ws/srcx/b.py")


def _rules(*items: tuple[str, str, str]) -> list[tuple[RuleText, Rule]]:
    texts = [RuleText(action, text, source) for action, text, source in items]  # type: ignore[arg-type]
    return [(t, t.parse("/ws")) for t in texts]


def test_deny_over_ask_over_allow_whatever_the_source() -> None:
    rules = _rules(
        ("allow", "bash(npm test:*)", "project settings"),
        ("ask", "bash(npm test --watch)", "project settings"),
        ("deny", "bash(npm test --bail)", "user settings"),
        ("allow", "bash(npm test --bail)", "--allow"),
    )
    assert decide(rules, "bash", "npm test -q").action == "allow"  # type: ignore[union-attr]
    assert decide(rules, "bash", "npm test --watch").action == "ask"  # type: ignore[union-attr]
    denied = decide(rules, "bash", "npm test --bail")
    assert denied is not None and (denied.action, denied.source) == ("deny", "user settings")
    assert decide(rules, "bash", "npm test; curl x") is None  # a prefix never matches a compound command


def test_a_permissions_object_and_its_mistakes() -> None:
    texts = from_permissions({"allow": ["Bash(ls)"], "deny": ["Read(~/.ssh/**)"], "defaultMode": "x"}, "settings")
    assert [(t.action, t.text) for t in texts] == [("allow", "Bash(ls)"), ("deny", "Read(~/.ssh/**)")]
    with pytest.raises(RuleError, match=r"settings: permissions.ask must be a list of rule strings"):
        from_permissions({"ask": "Bash(ls)"}, "settings")
