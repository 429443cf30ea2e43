"""Sessions where users look for them: ``$DSH_HOME/sessions`` grouped by folder, ``list`` per
folder or ``--all``, unique id prefixes everywhere; plus bare ``dsh``, help texts and the
one-line wording of time-zone and plugin errors."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsh.cli import build_parser
from tests.apps.conftest import bucket, dsh_env, run_dsh


def folders(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    a, b = tmp_path / "alpha", tmp_path / "beta"
    a.mkdir()
    b.mkdir()
    return a, b, {"DSH_HOME": str(tmp_path / "home")}


def run_json(cwd: Path, home: dict[str, str], *args: str) -> dict[str, object]:
    result = run_dsh(["run", *args, "--output-format", "json"], cwd, **home)
    assert result.returncode == 0, result.stderr
    obj: dict[str, object] = json.loads(result.stdout)
    return obj


@pytest.mark.slow
def test_two_folders_share_the_home_and_list_their_own(tmp_path: Path) -> None:
    a, b, home = folders(tmp_path)
    a1 = run_json(a, home, "first in alpha")["sessionId"]
    b1 = run_json(b, home, "only in beta")["sessionId"]
    a2 = run_json(a, home, "second in alpha")["sessionId"]
    root = tmp_path / "home" / "sessions"
    assert (bucket(root, a) / f"{a1}.jsonl").is_file() and (bucket(root, b) / f"{b1}.jsonl").is_file()
    assert not (a / ".sessions").exists()  # nothing in the project folder

    rows = json.loads(run_dsh(["sessions", "list", "--json"], a, **home).stdout)
    assert [r["id"] for r in rows] == [a2, a1]
    assert [r["title"] for r in rows] == ["second in alpha", "first in alpha"]
    assert rows[0]["turns"] == 1 and rows[0]["model"] == "mock-echo" and rows[0]["corrupt"] is None
    table = run_dsh(["sessions", "list"], b, **home).stdout
    assert "only in beta" in table and "first in alpha" not in table
    assert "TITLE" in table and "MODEL" in table and "LAST ACTIVITY (Asia/Shanghai, UTC+08:00)" in table
    everything = run_dsh(["sessions", "list", "--all"], tmp_path, **home).stdout
    assert all(title in everything for title in ("first in alpha", "second in alpha", "only in beta"))
    assert str(a) in everything and str(b) in everything
    nothing = run_dsh(["sessions", "list"], tmp_path, **home)
    assert nothing.stdout.startswith("no sessions for this folder") and "--all" in nothing.stdout

    # --continue picks this folder's newest, from either folder.
    assert run_json(b, home, "--continue", "again")["sessionId"] == b1
    assert run_json(a, home, "--continue", "again")["sessionId"] == a2


@pytest.mark.slow
def test_any_unique_prefix_works_and_an_ambiguous_one_lists_candidates(tmp_path: Path) -> None:
    a, _, home = folders(tmp_path)
    ids = [str(run_json(a, home, f"prompt {i}")["sessionId"]) for i in range(2)]
    uuid_part = ids[0].removeprefix("main-session-")
    for prefix in (ids[0][:20], uuid_part[:6]):
        show = run_dsh(["sessions", "show", prefix], a, **home)
        assert show.returncode == 0, show.stderr
        assert f"session {ids[0]}" in show.stdout
    export = run_dsh(["sessions", "export", uuid_part[:6]], a, **home)
    assert export.stdout.splitlines()[0].startswith('{"type":"session"') and ids[0] in export.stdout
    assert run_dsh(["sessions", "requests", uuid_part[:6], "--step", "1.1"], a, **home).returncode == 0
    ambiguous = run_dsh(["sessions", "show", "main-session-"], a, **home)
    assert ambiguous.returncode == 2
    [line] = ambiguous.stderr.strip().splitlines()
    assert 'prefix "main-session-" matches 2 sessions' in line and ids[0] in line and ids[1] in line
    chat = run_dsh(["chat", "--resume", uuid_part[:6]], a, stdin="more\n", **home)
    assert chat.returncode == 0, chat.stderr
    assert "[main turn 2]" in chat.stdout


@pytest.mark.slow
def test_xdg_data_home_is_the_default_home(tmp_path: Path) -> None:
    env = dsh_env(XDG_DATA_HOME=str(tmp_path / "xdg"))
    env.pop("DSH_HOME")
    cwd = tmp_path / "work"
    cwd.mkdir()
    result = subprocess.run([sys.executable, "-m", "dsh", "run", "hi"], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert list(bucket(tmp_path / "xdg" / "dsh" / "sessions", cwd).glob("*.jsonl"))


@pytest.mark.slow
def test_root_still_chooses_a_project_local_store(tmp_path: Path) -> None:
    a, _, home = folders(tmp_path)
    assert run_dsh(["run", "local", "--root", ".sessions"], a, **home).returncode == 0
    assert list(bucket(a / ".sessions", a).glob("*.jsonl"))
    assert not (tmp_path / "home" / "sessions").exists()
    listed = run_dsh(["sessions", "list", "--root", ".sessions", "--json"], a, **home)
    assert [r["title"] for r in json.loads(listed.stdout)] == ["local"]


@pytest.mark.slow
def test_show_has_model_usage_and_the_zone_of_its_times(tmp_path: Path) -> None:
    a, _, home = folders(tmp_path)
    sid = str(run_json(a, home, "echo 你好")["sessionId"])
    show = run_dsh(["sessions", "show", sid], a, **home).stdout
    assert "times in Asia/Shanghai, UTC+08:00" in show.splitlines()[0]
    [end] = [line for line in show.splitlines() if "■ turn 1 ended" in line]
    assert "model mock-echo" in end and "tokens in/out" in end
    requests = run_dsh(["sessions", "requests", sid, "--step", "1.2"], a, **home).stdout
    # Text and tool call are apart: the call is on a line of its own.
    assert "[assistant] Let me echo that for you.\n  → tool call echo(" in requests


def test_bare_dsh_prints_usage_and_exits_2(tmp_path: Path) -> None:
    result = run_dsh([], tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: dsh") and "run" in result.stderr and "sessions" in result.stderr


def test_every_option_has_help_text() -> None:
    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "dsh")
    assert missing == []


@pytest.mark.slow
def test_time_zone_and_plugin_errors_are_one_clean_line(tmp_path: Path) -> None:
    bogus = run_dsh(["run", "hi"], tmp_path, TZ="Nowhere/Bogus")
    assert bogus.returncode == 2
    assert bogus.stderr.strip().endswith(
        'TZ="Nowhere/Bogus" is not an IANA time zone; set TZ=Area/City or timeZone in the config'
    )
    (tmp_path / "c.yml").write_text(
        "- id: clock\n  name: time-context\n  config: {refreshIntervalMs: -5}\n"
        "- id: echo\n  name: echo-llm\n- id: app\n  name: stdio-app\n  config: {model: mock-echo}\n"
    )
    bad = run_dsh(["run", "hi", "--config", "c.yml"], tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        'dsh: plugin "clock": time-context: refreshIntervalMs must be a non-negative safe integer, got -5'
    )
