"""Permission rules: parsing, printing and matching (Hypothesis for the matcher's guarantees)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.permissions import SHELL_META, Rule, RuleError, parse_rule, session_scopes
from dsh.permissions.rules import literal_path

pytestmark = pytest.mark.attack

WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=8)
SIMPLE = st.lists(WORD, min_size=1, max_size=4).map(" ".join)
SEGMENT = st.text(alphabet="abcdefgh.-_*?\\[] xyz", min_size=1, max_size=6).filter(lambda s: s not in (".", ".."))
ABS = st.lists(SEGMENT, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("Bash", Rule("Bash")),
        ("Bash(git status)", Rule("Bash", "git status")),
        ("Bash(npm run test:*)", Rule("Bash", "npm run test", prefix=True)),
        ("Write(//abs/dir/**)", Rule("Write", "/abs/dir/**")),
        ("Edit(//x/notes.txt)", Rule("Edit", "/x/notes.txt")),
        ("mcp__server__tool", Rule("mcp__server__tool")),
    ],
)
def test_parse_and_print(text: str, rule: Rule) -> None:
    assert parse_rule(text) == rule and str(rule) == text


def test_relative_paths_need_a_base_and_bad_rules_say_why() -> None:
    assert parse_rule("Edit(src/**)", base="/proj") == Rule("Edit", "/proj/src/**")
    assert parse_rule("Read(~/notes)", home="/home/u") == Rule("Read", "/home/u/notes")
    for bad in ("Edit(/src/**)", "Bash(npm *)", "mcp__x(y)", "Bash(x", "1tool", "Write(//a/../b)"):
        with pytest.raises(RuleError):
            parse_rule(bad)


@given(prefix=SIMPLE, tail=SIMPLE, meta=st.sampled_from(sorted(SHELL_META)), after=SIMPLE)
def test_a_prefix_rule_never_matches_a_command_with_shell_metacharacters(prefix: str, tail: str, meta: str, after: str) -> None:
    rule = parse_rule(f"Bash({prefix}:*)")
    assert rule.matches("bash", prefix) and rule.matches("bash", f"{prefix} {tail}")
    for command in (f"{prefix}{meta}{after}", f"{prefix} {tail}{meta}{after}", f"{prefix} {meta} {after}"):
        assert not rule.matches("bash", command)
    assert not rule.matches("bash", f"{prefix}x")  # a word boundary
    assert not rule.matches("write", prefix)


@given(command=st.text(max_size=40))
def test_an_exact_rule_matches_only_its_own_text(command: str) -> None:
    rule = Rule("Bash", command)
    assert rule.matches("bash", command)
    assert not rule.matches("bash", command + " ") and not rule.matches("bash", command + ";x")


@given(folder=ABS, inner=st.lists(SEGMENT, min_size=1, max_size=3), other=ABS)
def test_a_folder_rule_matches_inside_it_and_nothing_else(folder: str, inner: list[str], other: str) -> None:
    rule = Rule("Write", literal_path(folder) + "/**")
    inside = folder + "/" + "/".join(inner)
    if os.path.normpath(inside) == inside:
        assert rule.matches("write", inside) and parse_rule(str(rule)) == rule
    assert not rule.matches("write", folder)
    assert not rule.matches("write", folder + "/../etc/passwd")
    if not other.startswith(folder + "/"):
        assert not rule.matches("write", other)


@given(path=ABS, other=ABS)
def test_an_exact_path_rule_matches_that_path_only(path: str, other: str) -> None:
    rule = Rule("Edit", literal_path(path))
    if os.path.normpath(path) == path:
        assert rule.matches("edit", path) and rule.matches("write", path)  # Edit covers writes
    if other != path:
        assert not rule.matches("edit", other)
    assert not Rule("Write", literal_path(path)).matches("edit", path)


@given(command=st.text(max_size=60))
def test_offered_scopes_read_back_as_themselves_and_cover_the_call(command: str) -> None:
    for rule, words in session_scopes("bash", command):
        assert parse_rule(str(rule)) == rule and rule.matches("bash", command) and words
        if rule.prefix:
            assert not any(ch in SHELL_META for ch in command)


def test_scopes_per_tool() -> None:
    assert [str(r) for r, _ in session_scopes("bash", "npm test --watch")] == ["Bash(npm test --watch)", "Bash(npm test:*)"]
    assert [str(r) for r, _ in session_scopes("bash", "npm test; rm -rf ~")] == ["Bash(npm test; rm -rf ~)"]
    assert [str(r) for r, _ in session_scopes("bash", "bash -c 'x y'")] == ["Bash(bash -c 'x y')"]
    assert [str(r) for r, _ in session_scopes("bash", "echo a:*")] == ["Bash(echo:*)"]  # the exact one would read back as a prefix
    assert [str(r) for r, _ in session_scopes("write", "/x/notes.txt")] == ["Write(//x/notes.txt)", "Write(//x/**)"]
    assert [str(r) for r, _ in session_scopes("write", "/notes.txt")] == ["Write(//notes.txt)"]
    assert session_scopes("write", None) == [] and session_scopes("bash", "") == []
    assert [str(r) for r, _ in session_scopes("mcp__s__t", None)] == ["mcp__s__t"]
