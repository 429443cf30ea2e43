"""The YAML plugin-list loader, against real files (docs/plugins.md)."""

from __future__ import annotations

import importlib.metadata
import textwrap
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from dsh.runtime import (
    Context,
    LoadError,
    PluginEntry,
    format_pending,
    load_config_file,
    load_plugins,
    parse_config,
    pending_entries,
    resolve_plugin,
)

PLUGIN_PY = '''
"""A test plugin loaded from a file next to the config."""
import msgspec

name = "counter"


class Config(msgspec.Struct):
    start: int = 0
    label: str = "c"


def apply(ctx, config):
    ctx.provide("counter", {"value": config.start, "label": config.label})
'''

CONSUMER_PY = """
name = "consumer"
inject = ["counter"]


def apply(ctx, config):
    ctx.provide("consumer", "sees %s" % ctx.counter["value"])
"""

FAILING_PY = """
name = "failing"


def apply(ctx, config):
    ctx.on("e", lambda: None)
    raise RuntimeError("failing: exploded on purpose")
"""


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    write(tmp_path / "counter.py", PLUGIN_PY)
    write(tmp_path / "consumer.py", CONSUMER_PY)
    write(tmp_path / "failing.py", FAILING_PY)
    return tmp_path


def test_parse_entries(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "config.yml",
        """
        - id: a
          name: ./counter.py
          config:
            start: 3
        - id: b
          name: dsh.tools.registry
          disabled: true
        """,
    )
    assert load_config_file(cfg) == [
        PluginEntry(id="a", name="./counter.py", config={"start": 3}, line=1),
        PluginEntry(id="b", name="dsh.tools.registry", disabled=True, line=5),
    ]
    assert parse_config("") == [] and parse_config("# nothing\n") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- id: a\n  name: [unclosed\n", r"^config\.yml: line 3: while parsing a flow sequence"),
        (
            "- id: a\n  name: !!js process.env.X\n",
            r"^config\.yml: line 2: could not determine a constructor for the tag 'tag:yaml.org,2002:js'$",
        ),
        (
            "- !!python/object:os.system {}\n",
            r"^config\.yml: line 1: could not determine a constructor",
        ),
        ("id: a\nname: b\n", r"^config\.yml: line 1: expected a list of plugin entries"),
        ("- just-a-string\n", r"^config\.yml: line 1: a plugin entry must be a mapping"),
        ("- id: a\n", r'^config\.yml: line 1: plugin "a": missing "name"$'),
        ("- name: x\n", r'^config\.yml: line 1: missing "id"$'),
        (
            "- id: [3]\n  name: x\n",
            r'^config\.yml: line 1: "id" must be a non-empty string, got a list$',
        ),
        ("- id:\n  name: x\n", r'^config\.yml: line 1: "id" must be a non-empty string, got null$'),
        (
            "- id: a\n  name: x\n  disabled: maybe\n",
            r'^config\.yml: line 1: plugin "a": "disabled" must be true or false',
        ),
        (
            "- id: a\n  name: x\n  group: g\n",
            r'^config\.yml: line 3: unknown key "group" in plugin entry',
        ),
        (
            "- id: a\n  name: x\n  id: b\n",
            r'^config\.yml: line 3: duplicate key "id" \(first at line 1\)$',
        ),
        (
            "- id: tc\n  name: x\n- id: other\n  name: y\n- id: tc\n  name: z\n",
            r'^config\.yml: line 5: duplicate plugin id "tc" \(first at line 1\)$',
        ),
        ("- &a [*a]\n", r"^config\.yml: line 1: recursive alias; refused$"),
    ],
)
def test_config_file_errors(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "config.yml"
    cfg.write_text(text, encoding="utf-8")
    with pytest.raises(LoadError, match=message) as info:
        parse_config(text, source="config.yml")
    assert "\n" not in str(info.value)
    with pytest.raises(LoadError) as from_file:
        load_config_file(cfg)
    assert str(from_file.value) == str(info.value).replace("config.yml", str(cfg), 1)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match=r"nope\.yml: cannot read"):
        load_config_file(tmp_path / "nope.yml")


@pytest.mark.perf
def test_billion_laughs_is_refused_fast(tmp_path: Path) -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    prev = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
        prev = name
    lines.append("- id: x")  # never reached: the bomb is refused first
    cfg = write(tmp_path / "bomb.yml", "x:\n" + "\n".join("  " + ln for ln in lines[:-1]) + "\n")
    start = time.perf_counter()
    with pytest.raises(LoadError, match=r"expands to more than .* nodes through aliases"):
        load_config_file(cfg)
    assert time.perf_counter() - start < 1.0


def test_yaml_11_scalars_keep_their_text_for_id_and_name() -> None:
    entries = parse_config("- id: off\n  name: mod\n- id: 010\n  name: yes\n")
    assert [(e.id, e.name) for e in entries] == [("off", "mod"), ("010", "yes")]


def test_modest_aliases_are_fine() -> None:
    text = textwrap.dedent(
        """
        - id: a
          name: x
          config: &shared {zone: UTC, every: 5}
        - id: b
          name: y
          config: *shared
        """
    )
    entries = parse_config(text)
    assert entries[0].config == entries[1].config == {"zone": "UTC", "every": 5}


async def test_load_py_files_relative_to_config_in_any_order(plugin_dir: Path) -> None:
    sub = plugin_dir / "conf"
    sub.mkdir()
    cfg = write(
        sub / "dsh.yml",
        """
        - id: consumer
          name: ../consumer.py
        - id: counter
          name: ../counter.py
          config: {start: 41, label: answer}
        - id: off
          name: ./does-not-exist.py
          disabled: true
        """,
    )
    ctx = Context()
    loaded = await load_plugins(ctx, cfg)
    assert [item.entry.id for item in loaded] == ["consumer", "counter"]
    assert all(item.fiber.state == "active" for item in loaded)
    assert ctx.counter == {"value": 41, "label": "answer"}
    assert ctx.consumer == "sees 41"
    assert pending_entries(loaded) == []
    await ctx.dispose()


async def test_same_file_loaded_twice_gets_fresh_modules(plugin_dir: Path) -> None:
    a = resolve_plugin("counter.py", base_dir=plugin_dir)
    b = resolve_plugin("./counter.py", base_dir=plugin_dir)
    assert isinstance(a, ModuleType) and isinstance(b, ModuleType)
    assert a is not b and a.name == "counter"


async def test_pending_entries_are_reported_not_raised(plugin_dir: Path) -> None:
    cfg = write(plugin_dir / "c.yml", "- id: lonely\n  name: ./consumer.py\n")
    loaded = await load_plugins(Context(), cfg)
    pending = pending_entries(loaded)
    assert [(p.entry.id, p.missing) for p in pending] == [("lonely", ("counter",))]
    assert format_pending(pending) == (
        'plugin "lonely" (./consumer.py) is waiting for service(s): counter'
    )


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "foo",
            r'^plugin "x": unknown plugin name "foo" \(not a module, entry point or \.py file\)$',
        ),
        ("no_such_pkg.sub", r'^plugin "x": unknown plugin name "no_such_pkg.sub"'),
        ("has spaces!", r'^plugin "x": unknown plugin name "has spaces!"'),
        ("./missing.py", r'^plugin "x": plugin file "./missing.py" not found'),
        ("json", r'^plugin "x": "json" is not a plugin \(it has no apply\(\)\)$'),
        (
            "dsh.tools.registry:nothing",
            r'^plugin "x": "dsh.tools.registry" has no attribute "nothing"$',
        ),
    ],
)
async def test_unresolvable_names(tmp_path: Path, name: str, message: str) -> None:
    entries = [PluginEntry(id="x", name=name)]
    with pytest.raises(LoadError, match=message):
        await load_plugins(Context(), entries, base_dir=tmp_path)


async def test_import_failures_are_one_line(tmp_path: Path) -> None:
    write(tmp_path / "broken.py", "def apply(ctx, config):\n    return (\n")
    write(tmp_path / "needs_dep.py", "import definitely_not_installed_xyz\n")
    with pytest.raises(LoadError, match=r'^plugin "b": broken\.py: SyntaxError: ') as info:
        await load_plugins(Context(), [PluginEntry(id="b", name="broken.py")], base_dir=tmp_path)
    assert "\n" not in str(info.value)
    with pytest.raises(
        LoadError,
        match=r"^plugin \"d\": needs_dep\.py: ModuleNotFoundError: No module named 'definitely_not_installed_xyz'$",
    ):
        await load_plugins(Context(), [PluginEntry(id="d", name="needs_dep.py")], base_dir=tmp_path)


async def test_dotted_module_whose_dependency_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "mod_with_bad_dep.py", "import definitely_not_installed_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        LoadError, match=r'^plugin "m": cannot import "mod_with_bad_dep": ModuleNotFoundError'
    ):
        await load_plugins(Context(), [PluginEntry(id="m", name="mod_with_bad_dep")])


async def test_failing_plugin_rolls_back_the_whole_load(plugin_dir: Path) -> None:
    cfg = write(
        plugin_dir / "c.yml",
        """
        - id: counter
          name: ./counter.py
        - id: boom
          name: ./failing.py
        """,
    )
    ctx = Context()
    with pytest.raises(LoadError, match=r'^plugin "boom": failing: exploded on purpose$'):
        await load_plugins(ctx, cfg)
    assert not ctx.has("counter") and ctx.listeners("e") == 0
    assert ctx.fiber.children == ()


async def test_config_validation_error_names_entry_and_path(plugin_dir: Path) -> None:
    cfg = write(plugin_dir / "c.yml", "- id: cnt\n  name: ./counter.py\n  config: {start: nope}\n")
    with pytest.raises(
        LoadError, match=r'^plugin "cnt": counter: \$\.start: expected int, got str$'
    ):
        await load_plugins(Context(), cfg)


async def test_plugin_that_already_prefixes_its_name_is_not_doubled(tmp_path: Path) -> None:
    write(
        tmp_path / "tc.py",
        'name = "time-context"\n'
        "def apply(ctx, config):\n"
        "    raise ValueError('time-context: invalid IANA timeZone \"Nope/Zone\"')\n",
    )
    with pytest.raises(
        LoadError, match=r'^plugin "tc": time-context: invalid IANA timeZone "Nope/Zone"$'
    ):
        await load_plugins(Context(), [PluginEntry(id="tc", name="tc.py")], base_dir=tmp_path)


async def test_programming_errors_keep_their_type(tmp_path: Path) -> None:
    write(tmp_path / "k.py", 'name = "k"\ndef apply(ctx, config):\n    return {}["missing"]\n')
    with pytest.raises(LoadError, match=r"^plugin \"k\": k: KeyError: 'missing'$"):
        await load_plugins(Context(), [PluginEntry(id="k", name="k.py")], base_dir=tmp_path)


async def test_earlier_pending_entry_failing_when_unblocked_is_reported(plugin_dir: Path) -> None:
    write(
        plugin_dir / "bad_consumer.py",
        'name = "bad-consumer"\ninject = ["counter"]\n'
        "def apply(ctx, config):\n    raise RuntimeError('needs more than a counter')\n",
    )
    cfg = write(
        plugin_dir / "c.yml",
        "- id: early\n  name: ./bad_consumer.py\n- id: counter\n  name: ./counter.py\n",
    )
    ctx = Context()
    with pytest.raises(
        LoadError, match=r'^plugin "early": bad-consumer: needs more than a counter$'
    ):
        await load_plugins(ctx, cfg)
    assert not ctx.has("counter")


async def test_entry_point_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = [
        importlib.metadata.EntryPoint(
            name="tools-ep", value="dsh.tools.registry", group="dsh.plugins"
        ),
        importlib.metadata.EntryPoint(
            name="ghost", value="dsh.no_such_module_xyz", group="dsh.plugins"
        ),
    ]

    def entry_points(**kwargs: Any) -> list[importlib.metadata.EntryPoint]:
        assert kwargs == {"group": "dsh.plugins"}
        return fake

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    ctx = Context()
    await load_plugins(ctx, [PluginEntry(id="t", name="tools-ep")], base_dir=tmp_path)
    assert ctx.tools.schemas() == []
    with pytest.raises(
        LoadError,
        match=r'^plugin "g": cannot load "ghost" \(dsh\.no_such_module_xyz\): ModuleNotFoundError',
    ):
        await load_plugins(ctx, [PluginEntry(id="g", name="ghost")], base_dir=tmp_path)


def test_real_entry_point_group_is_declared() -> None:
    names = {ep.name for ep in importlib.metadata.entry_points(group="dsh.plugins")}
    assert {"time-context", "echo-llm", "jsonl-sessions", "stdio-app"} <= names


async def test_dotted_module_and_module_attr(tmp_path: Path) -> None:
    ctx = Context()
    entries = [
        PluginEntry(id="tools", name="dsh.tools.registry", config={"toolOrder": ["echo"]}),
        PluginEntry(id="echo", name="dsh.tools.echo"),
    ]
    await load_plugins(ctx, entries, base_dir=tmp_path)
    assert [s["name"] for s in ctx.tools.schemas()] == ["echo"]
