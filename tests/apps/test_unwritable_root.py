"""An unwritable session folder is refused with one line before ``ready.`` (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.apps.conftest import run_dsh
from tests.apps.test_terminal import Pty


@pytest.mark.slow
@pytest.mark.parametrize(
    ("root", "message"),
    [
        ("afile/sessions", "cannot create session folder afile/sessions: afile is a file"),
        ("afile/deeper/sessions", "cannot create session folder afile/deeper/sessions: afile is a file"),
        ("/proc/x", "cannot create session folder /proc/x: "),
    ],
)
def test_plain_mode_refuses_before_ready(workdir: Path, root: str, message: str) -> None:
    (workdir / "afile").write_text("")
    result = run_dsh(["chat", "--root", root], workdir, stdin="hello\n")
    assert result.returncode == 2
    assert result.stdout == ""  # no "ready.", no reply
    [line] = result.stderr.splitlines()
    assert line.startswith(f"dsh: {message}")
    assert "Traceback" not in result.stderr


def test_a_composition_with_an_unwritable_sqlite_folder(workdir: Path) -> None:
    (workdir / "afile").write_text("")
    (workdir / "c.yml").write_text(
        "- id: model\n  name: echo-llm\n- id: app\n  name: stdio-app\n"
        "  config: {model: mock-echo, store: sqlite, sqlitePath: afile/db.sqlite3}\n"
    )
    result = run_dsh(["chat", "--config", "c.yml"], workdir, stdin="hello\n")
    assert result.returncode == 2
    assert result.stderr == "dsh: cannot create session folder afile: afile is a file\n"


@pytest.mark.slow
def test_terminal_mode_refuses_before_the_prompt(workdir: Path) -> None:
    (workdir / "afile").write_text("")
    term = Pty(["chat", "--root", "afile/sessions"], workdir)
    term.expect("cannot create session folder afile/sessions: afile is a file")
    assert term.wait() == 2
    assert b"Traceback" not in term.screen and b"ready." not in term.screen
