"""End to end: a skill in ``.claude/skills/pdf/SKILL.md`` seen by the real ``dsh chat`` (scripted
model on loopback) and by ``dsh skills list``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tests.apps.conftest import run_dsh, session_files
from tests.llm.sse_server import SSEServer
from tests.plugins.hooks.hook_support import env
from tests.tools.workspace.cli_support import calls, done

SKILL = "---\nname: pdf\ndescription: Fill in and read PDF forms.\n---\n# PDF forms\nRun scripts/fill.py FORM.\n"


def _project(tmp_path: Path) -> Path:
    cwd = tmp_path / "project"
    (cwd / ".claude" / "skills" / "pdf").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=cwd, check=True)
    (cwd / ".claude" / "skills" / "pdf" / "SKILL.md").write_text(SKILL)
    return cwd


def _catalogs(messages: list[dict[str, object]]) -> int:
    return sum("<available_skills>" in json.dumps(m) for m in messages)


@pytest.mark.slow
def test_skill_listed_once_read_by_the_model_and_listed_by_the_cli(tmp_path: Path) -> None:
    cwd = _project(tmp_path)
    environ = env(tmp_path)
    path = cwd.resolve() / ".claude" / "skills" / "pdf" / "SKILL.md"
    args = ["chat", "--base-url", "", "--model", "test-model"]
    with SSEServer() as server:
        args[2] = server.base_url
        server.push(calls(("read", {"file_path": str(path)})))
        server.push(done("Loaded the pdf skill."))
        first = run_dsh(args, cwd, stdin="fill the form\n", timeout=120, **environ)
        server.push(done("Again."))
        second = run_dsh([*args, "--continue"], cwd, stdin="and again\n", timeout=120, **environ)
        requests = [r.json for r in server.requests]
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert len(requests) == 3
    # Listed once, before the first request, and never repeated, in this process or the next.
    assert [_catalogs(r["messages"]) for r in requests] == [1, 1, 1]
    catalog = next(m for m in requests[0]["messages"] if "<available_skills>" in json.dumps(m))
    assert f"- `pdf`: Fill in and read PDF forms. ({path})" in catalog["content"]
    assert all("<available_skills>" not in m["content"] for m in requests[0]["messages"] if m["role"] == "system")
    assert "skill" in {t["function"]["name"] for t in requests[0]["tools"]}
    tool = [m for m in requests[1]["messages"] if m["role"] == "tool"]
    assert "Run scripts/fill.py FORM." in tool[0]["content"]
    [log] = session_files(cwd, Path(environ["DSH_HOME"]) / "sessions")
    lines = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    ours = [e for e in lines if e["type"] == "context/message" and e["data"]["source"] == {"kind": "plugin", "plugin": "skills"}]
    assert len(ours) == 1
    assert ours[0]["data"]["meta"] == {"entries": [{"name": "pdf", "description": "Fill in and read PDF forms.", "path": str(path)}]}

    listed = run_dsh(["skills", "list"], cwd, **environ)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [f"pdf  [project .claude/skills]  {path}", "  Fill in and read PDF forms."]
    as_json = run_dsh(["skills", "list", "--json"], cwd, **environ)
    assert json.loads(as_json.stdout) == [
        {"name": "pdf", "description": "Fill in and read PDF forms.", "path": str(path), "source": "project .claude/skills"}
    ]


@pytest.mark.slow
def test_a_changed_skill_set_appends_a_replacement_catalog(tmp_path: Path) -> None:
    cwd = _project(tmp_path)
    environ = env(tmp_path)
    with SSEServer() as server:
        args = ["chat", "--base-url", server.base_url, "--model", "test-model"]
        server.push(done("one"))
        assert run_dsh(args, cwd, stdin="one\n", timeout=120, **environ).returncode == 0
        extra = cwd / ".agents" / "skills" / "csv"
        extra.mkdir(parents=True)
        (extra / "SKILL.md").write_text("---\nname: csv\ndescription: Clean CSV files.\n---\nUse csvkit.\n")
        server.push(done("two"))
        assert run_dsh([*args, "--continue"], cwd, stdin="two\n", timeout=120, **environ).returncode == 0
        last = server.requests[-1].json["messages"]
    texts = [m["content"] for m in last if "<available_skills>" in json.dumps(m)]
    assert len(texts) == 2
    assert "The available skill catalog changed." in texts[1] and "- `csv`: Clean CSV files." in texts[1]


def test_a_bad_skill_is_one_warning_line(tmp_path: Path) -> None:
    cwd = _project(tmp_path)
    bad = cwd / ".dsh" / "skills" / "broken"
    bad.mkdir(parents=True)
    (bad / "SKILL.md").write_text("---\nname: Not Kebab\n---\nbody\n")
    result = run_dsh(["skills", "list"], cwd, **env(tmp_path))
    assert result.returncode == 0
    assert result.stderr.splitlines() == [
        f"dsh: skill {cwd.resolve()}/.dsh/skills/broken/SKILL.md: name must be kebab-case (got 'Not Kebab'); skipped"
    ]
    assert result.stdout.startswith("pdf  [project .claude/skills]")
