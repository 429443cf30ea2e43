"""``/hooks`` and ``/skills`` in terminal-mode ``dsh chat`` (a real pty), and the trust offer at
start for an untrusted project settings file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.apps.pty_screen import Terminal

from .hook_support import command_hook, env, project, trust

pytestmark = [pytest.mark.pty, pytest.mark.slow]


def test_hooks_and_skills_slash_commands(tmp_path: Path) -> None:
    cwd = project(tmp_path, {"PreToolUse": [command_hook("./guard.sh", "Bash", timeout=5)]})
    environ = env(tmp_path)
    trust(cwd, environ)
    # A second project file, added after the trust: offered at start, declined.
    (cwd / ".dsh").mkdir()
    (cwd / ".dsh" / "settings.json").write_text(json.dumps({"hooks": {"Stop": [command_hook("./nag.sh")]}}))
    skill = cwd / ".claude" / "skills" / "pdf"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: pdf\ndescription: PDF forms.\n---\nbody\n")
    term = Terminal(["chat"], cwd, **environ)
    term.expect("Trust this file and start what it runs? [y/N]")
    assert "hook Stop: sh -c ./nag.sh" in term.text()
    term.type("n\r")
    term.expect("/exit to leave")
    term.type("/hooks\r")
    term.expect("PreToolUse Bash: ./guard.sh")
    screen = term.expect("not in force (untrusted)")
    flat = screen.replace("\n", "")
    assert ".claude/settings.json, timeout 5s)" in flat
    assert "/.dsh/settings.json; review and trust it with: dsh trust" in flat
    term.type("/skills\r")
    term.expect("pdf  [project .claude/skills]")
    term.type("/exit\r")
    assert term.wait() == 0
