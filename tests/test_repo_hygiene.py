"""The repository is self-contained: no file points at material outside it (the reference
folders a clone does not have) or cites contract sections by number instead of docs/ pages."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Spelled in pieces so this file does not match itself.
FORBIDDEN = ("../" + "shared/", "/work/" + "shared", "contracts " + "§", "harness-" + "contracts")


def test_no_file_points_outside_the_repository() -> None:
    offenders = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT).as_posix()
        if not path.is_file() or rel.startswith((".venv/", ".git/")) or "/.pytest_cache/" in rel:
            continue
        if path.suffix not in {".py", ".md", ".toml", ".yml", ".yaml", ".txt", ".cfg"}:
            continue
        text = path.read_text(errors="replace")
        offenders += [f"{rel}: {needle}" for needle in FORBIDDEN if needle in text]
    assert offenders == []


def test_docs_pages_link_to_pages_that_exist() -> None:
    import re

    missing = []
    for page in (ROOT / "docs").glob("*.md"):
        for target in re.findall(r"\]\(([a-z0-9-]+\.md)\)", page.read_text()):
            if not (ROOT / "docs" / target).is_file():
                missing.append(f"{page.name} -> {target}")
    assert missing == []
