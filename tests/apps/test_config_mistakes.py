"""Config mistakes are refused with one line naming the key or flag (exit 2), never ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.apps.conftest import run_dsh

ECHO = "- id: model\n  name: echo-llm\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            "- id: clock\n  name: time-context\n  config: {timezone: Asia/Tokyo}\n"
            "- id: app\n  name: stdio-app\n  config: {model: mock-echo}\n",
            'unknown key "timezone" in plugin "clock" (did you mean "timeZone"?)',
        ),
        (
            "- id: app\n  name: stdio-app\n  config: {model: mock-echo, persistanceRoot: ./elsewhere}\n",
            'unknown key "persistanceRoot" in plugin "app" (did you mean "persistenceRoot"?)',
        ),
        (
            "- id: store\n  name: jsonl-sessions\n  config: {root: ./s, fsync: false}\n"
            "- id: app\n  name: stdio-app\n  config: {model: mock-echo}\n",
            'unknown key "fsync" in plugin "store"',
        ),
        (
            "- id: llm\n  name: openai-llm\n  config: {base_url: 'http://127.0.0.1:9', models: [x]}\n"
            "- id: app\n  name: stdio-app\n  config: {model: x}\n",
            'unknown key "base_url" in plugin "llm" (did you mean "baseURL"?)',
        ),
    ],
)
def test_unknown_config_keys_are_refused(workdir: Path, entries: str, message: str) -> None:
    (workdir / "c.yml").write_text(ECHO + entries)
    result = run_dsh(["chat", "--config", "c.yml"], workdir, stdin="hello\n")
    assert result.returncode == 2
    assert result.stderr == f"dsh: {message}\n"
    assert result.stdout == ""
    assert not (workdir / "elsewhere").exists() and not (workdir / ".sessions").exists()


@pytest.mark.slow
def test_sessions_commands_refuse_unknown_store_keys(workdir: Path) -> None:
    (workdir / "c.yml").write_text("- id: store\n  name: sqlite-sessions\n  config: {path: ./db, pth: ./x}\n")
    result = run_dsh(["sessions", "list", "--config", "c.yml"], workdir)
    assert result.returncode == 2
    assert result.stderr == 'dsh: unknown key "pth" in plugin "store" (did you mean "path"?)\n'


APP = ECHO + "- id: app\n  name: stdio-app\n  config: {model: mock-echo}\n"
MOUNTED = ECHO + "- id: store\n  name: jsonl-sessions\n  config: {root: ./s}\n" + "- id: app\n  name: stdio-app\n  config: {model: mock-echo}\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config", "args", "message"),
    [
        (None, ["--sqlite", "db.sqlite3"], "--sqlite needs --store sqlite"),
        (None, ["--dsn", "postgresql://127.0.0.1/test"], "--dsn needs --store postgres"),
        (None, ["--store", "postgres", "--root", "x"], "--root names a JSONL or SQLite folder"),
        (APP, ["--base-url", "http://127.0.0.1:9/v1"], "--base-url only applies without --config"),
        (APP, ["--sqlite", "db.sqlite3"], "--sqlite needs --store sqlite"),
        (MOUNTED, ["--root", "elsewhere"], "--root cannot change the store: the composition mounts its own (store)"),
        (MOUNTED, ["--store", "sqlite"], "--store cannot change the store"),
    ],
)
def test_flags_the_composition_would_ignore_are_refused(
    workdir: Path, config: str | None, args: list[str], message: str
) -> None:
    extra = []
    if config is not None:
        (workdir / "c.yml").write_text(config)
        extra = ["--config", "c.yml"]
    result = run_dsh(["chat", *extra, *args], workdir, stdin="hello\n")
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"dsh: {message}")
    assert result.stdout == ""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sqlite", "db.sqlite3"], "--sqlite needs --store sqlite"),
        (["--store", "sqlite", "--dsn", "postgresql://127.0.0.1/test"], "--dsn needs --store postgres"),
    ],
)
def test_sessions_flags_the_store_would_ignore_are_refused(workdir: Path, args: list[str], message: str) -> None:
    result = run_dsh(["sessions", "list", *args], workdir)
    assert result.returncode == 2
    assert result.stderr == f"dsh: {message}\n"


@pytest.mark.slow
def test_sqlite_flag_with_sqlite_store_takes_effect(workdir: Path) -> None:
    result = run_dsh(["chat", "--store", "sqlite", "--sqlite", "here.sqlite3"], workdir, stdin="hello\n")
    assert result.returncode == 0, result.stderr
    assert (workdir / "here.sqlite3").exists()
