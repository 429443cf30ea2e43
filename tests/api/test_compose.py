"""The composition root: store specs and the spine it mounts."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.compose import app_store_entry, mount_spine, mount_store, store_entry
from dsh.errors import UsageError
from dsh.persistence.jsonl import JsonlStore
from dsh.runtime import Context
from dsh.runtime.loader import PluginEntry


@pytest.mark.parametrize(
    ("spec", "name", "config"),
    [
        ("sessions", "jsonl-sessions", {"root": "{base}/sessions"}),
        ("/abs/folder", "jsonl-sessions", {"root": "/abs/folder"}),
        ("sqlite:///dsh.db", "sqlite-sessions", {"path": "{base}/dsh.db"}),
        ("sqlite:////abs/dsh.db", "sqlite-sessions", {"path": "/abs/dsh.db"}),
        ("postgresql://u@h:5432/db", "postgres-sessions", {"dsn": "postgresql://u@h:5432/db"}),
        ("postgres://h/db", "postgres-sessions", {"dsn": "postgres://h/db"}),
    ],
)
def test_store_specs(tmp_path: Path, spec: str, name: str, config: dict[str, str]) -> None:
    entry = store_entry(spec, base_dir=tmp_path)
    base = str(tmp_path.resolve())
    assert entry == PluginEntry("store", name, {k: v.format(base=base) for k, v in config.items()})


def test_a_path_object_is_a_jsonl_root(tmp_path: Path) -> None:
    assert store_entry(tmp_path / "x").config == {"root": str((tmp_path / "x").resolve())}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty store"),
        ("sqlite://dsh.db", "a SQLite store is sqlite:///FILE"),
        ("sqlite:///", "a SQLite store is sqlite:///FILE"),
        ("mysql://h/db", 'unknown scheme "mysql"'),
    ],
)
def test_bad_store_specs_are_one_line_usage_errors(spec: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        store_entry(spec)
    assert "\n" not in str(caught.value)


def test_the_app_store_config() -> None:
    assert app_store_entry("sqlite", "/r").config == {"path": "/r/sessions.sqlite3"}
    assert app_store_entry("jsonl", "/r").config == {"root": "/r"}
    with pytest.raises(UsageError, match='store must be "jsonl" or "sqlite"'):
        app_store_entry("redis", "/r")


async def test_mount_spine_reuses_what_is_mounted_and_mounts_a_store_object(tmp_path: Path) -> None:
    ctx = Context()
    store = JsonlStore(tmp_path)
    fibers = await mount_spine(ctx, store=store)
    assert [f.name for f in fibers] == [
        "sessions", "llm", "tools", "system-prompt", "agents", "session-store", "agent-loop",
    ]
    assert ctx.session_store is store
    assert await mount_spine(ctx) == []  # everything is there already
    with pytest.raises(TypeError, match="store must be"):
        await mount_store(Context(), 42)  # type: ignore[arg-type]
    await ctx.dispose()
