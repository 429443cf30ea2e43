"""The README's test command is the one ``.ci/run`` runs, and dev tools stay out of ``uv run``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    [command] = re.findall(r"^(uv run [^#\n]*pytest)\s", readme, flags=re.MULTILINE)
    assert command.strip() == "uv run --group dev pytest"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    # verbatim, alone on its line (CI may note its status to run the second tier anyway)
    assert any(line.strip() in (command, f"{command} || status=$?") for line in ci)


def test_ci_runs_the_second_tier_the_suite_defers() -> None:
    from tests.conftest import SECOND_TIER

    ci = (ROOT / ".ci" / "run").read_text()
    assert f'uv run --group dev pytest -m "{" or ".join(SECOND_TIER)}"' in ci
    readme = (ROOT / "README.md").read_text()
    assert f'uv run --group dev pytest -m "{" or ".join(SECOND_TIER)}"' in readme


def test_the_dev_group_is_not_installed_by_default() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["tool"]["uv"]["default-groups"] == []
    assert "pytest>=8" in project["dependency-groups"]["dev"]
    assert not any(dep.startswith(("pytest", "mypy", "ruff", "hypothesis")) for dep in project["project"]["dependencies"])
