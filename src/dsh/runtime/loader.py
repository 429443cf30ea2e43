"""The YAML plugin-list loader (the reference's ``cordis.yml`` Loader).

This module owns reading a config file (a YAML list of ``{id, name, config?, disabled?}``
entries), resolving each ``name`` to a plugin object, and loading the entries into a
``Context`` in file order. Dependency gating is the Context's job, so entries may appear in any
order; an entry still waiting for a service at the end is reported by :func:`pending_entries`.

Parsing is deliberately defensive because config files may come from anywhere: ``yaml.SafeLoader``
refuses custom tags (``!!js``, ``!!python/object``), duplicate mapping keys are refused instead of
silently keeping the last one, and a document whose alias expansion would be huge (a "billion
laughs" bomb) is refused after composing the node graph, before anything expands it.

Every failure raises :class:`LoadError` with one line naming the file/line or the entry id and
the cause.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import itertools
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from dsh._extras import MissingExtra
from dsh.runtime.config import UnknownKeyError
from dsh.runtime.context import Context, Fiber

__all__ = [
    "ENTRY_POINT_GROUP",
    "LoadError",
    "LoadedPlugin",
    "PendingEntry",
    "PluginEntry",
    "format_pending",
    "load_config_file",
    "load_plugins",
    "parse_config",
    "pending_entries",
    "resolve_plugin",
]

ENTRY_POINT_GROUP = "dsh.plugins"

# Upper bound on the number of YAML nodes a document may expand to once aliases are followed.
# A hand-written plugin list is a few hundred nodes; a billion-laughs bomb is ~10^9.
MAX_EXPANDED_NODES = 100_000

# Upper bound on nested flow collections (``[[[...`` / ``{a: {b: ...``). PyYAML's scanner does
# work proportional to the flow depth for every token, so a few hundred nested ``[`` cost a
# second before the composer's recursion limit refuses the document; this refuses it at once.
MAX_FLOW_DEPTH = 64

_ENTRY_KEYS = ("id", "name", "config", "disabled")
_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][\w.]*)?")
_module_counter = itertools.count(1)


class LoadError(Exception):
    """A config file or plugin entry failed to load. ``str(err)`` is one line."""


@dataclass(frozen=True)
class PluginEntry:
    """One entry of a plugin list. ``line`` is the 1-based line in the config file, if any."""

    id: str
    name: str
    config: Any = None
    disabled: bool = False
    line: int | None = None


@dataclass(frozen=True)
class LoadedPlugin:
    """An enabled entry and the fiber it was loaded into."""

    entry: PluginEntry
    fiber: Fiber


@dataclass(frozen=True)
class PendingEntry:
    """An entry whose plugin still waits for services nobody provided."""

    entry: PluginEntry
    fiber: Fiber
    missing: tuple[str, ...]


# -- YAML parsing ---------------------------------------------------------------------------------


class _SafeLoader(yaml.SafeLoader):
    """SafeLoader that also refuses duplicate mapping keys and deeply nested flow collections."""

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        if self.flow_level >= MAX_FLOW_DEPTH:
            raise yaml.scanner.ScannerError(
                None,
                None,
                f"flow collections nested more than {MAX_FLOW_DEPTH} deep; refused",
                self.get_mark(),
            )
        super().fetch_flow_collection_start(TokenClass)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[object, int] = {}
        for key_node, _value in node.value:
            if (
                not isinstance(key_node, yaml.ScalarNode)
                or key_node.tag == "tag:yaml.org,2002:merge"
            ):
                continue
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f'duplicate key "{key_node.value}" (first at line {seen[key]})',
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: yaml.Node, limit: int) -> None:
    """Refuse a node graph whose alias-expanded size exceeds ``limit`` (or that is recursive).

    Composing keeps aliases as shared nodes, so the graph itself is small; this walks it once
    with memoised subtree sizes (iteratively, so deep nesting cannot hit the recursion limit).
    """
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        nid = id(node)
        if finished:
            in_progress.discard(nid)
            total = 1 + sum(sizes[id(c)] for c in _children(node))
            if total > limit:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"document expands to more than {limit} nodes through aliases; refused",
                    node.start_mark,
                )
            sizes[nid] = total
            continue
        if nid in sizes:
            continue
        if nid in in_progress:
            raise yaml.composer.ComposerError(
                None, None, "recursive alias; refused", node.start_mark
            )
        in_progress.add(nid)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)


def _yaml_error(source: str, exc: yaml.YAMLError) -> LoadError:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        parts = [p for p in (exc.context, exc.problem) if p]
        text = ": ".join(parts) or type(exc).__name__
        if mark is not None:
            return LoadError(f"{source}: line {mark.line + 1}: {_one_line(text)}")
        return LoadError(f"{source}: {_one_line(text)}")
    return LoadError(f"{source}: {_one_line(str(exc)) or type(exc).__name__}")


def parse_config(text: str, *, source: str = "<config>") -> list[PluginEntry]:
    """Parse and validate the text of a plugin list. ``source`` names it in error messages."""
    loader = _SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
            if node is None:
                return []
            _check_expansion(node, MAX_EXPANDED_NODES)
            data = loader.construct_document(node)
        except yaml.YAMLError as exc:
            raise _yaml_error(source, exc) from None
        except RecursionError:
            raise LoadError(f"{source}: document is nested too deeply") from None
    finally:
        loader.dispose()
    if data is None:
        return []
    if not isinstance(data, list) or not isinstance(node, yaml.SequenceNode):
        raise LoadError(
            f"{source}: line {node.start_mark.line + 1}: expected a list of plugin entries "
            f"({{id, name, config?, disabled?}}), got {_yaml_type(data)}"
        )
    entries: list[PluginEntry] = []
    first_line: dict[str, int] = {}
    for item, item_node in zip(data, node.value, strict=True):
        line = item_node.start_mark.line + 1
        entry = _validate_entry(item, item_node, source, line)
        if entry.id in first_line:
            raise LoadError(
                f'{source}: line {line}: duplicate plugin id "{entry.id}" '
                f"(first at line {first_line[entry.id]})"
            )
        first_line[entry.id] = line
        entries.append(entry)
    return entries


def _key_line(node: yaml.Node, key: str, default: int) -> int:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return int(v.start_mark.line) + 1
    return default


def _scalar_text(node: yaml.Node, key: str, value: object) -> object:
    """``id``/``name`` as written: YAML 1.1 would turn ``id: off`` into ``False`` and
    ``id: 010`` into ``8``; a plain scalar's source text is what the author meant."""
    if value is None or not isinstance(node, yaml.MappingNode):
        return value
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key and isinstance(v, yaml.ScalarNode):
            return str(v.value)
    return value


def _validate_entry(item: object, node: yaml.Node, source: str, line: int) -> PluginEntry:
    if not isinstance(item, dict):
        raise LoadError(
            f"{source}: line {line}: a plugin entry must be a mapping "
            f"{{id, name, config?, disabled?}}, got {_yaml_type(item)}"
        )
    where = f"{source}: line {line}"
    ident = _scalar_text(node, "id", item.get("id"))
    if isinstance(ident, str) and ident:
        where = f'{source}: line {line}: plugin "{ident}"'
    for key in item:
        if key not in _ENTRY_KEYS:
            raise LoadError(
                f"{source}: line {_key_line(node, str(key), line)}: unknown key {_quote(key)} "
                f"in plugin entry (expected id, name, config, disabled)"
            )
    if "id" not in item:
        raise LoadError(f'{where}: missing "id"')
    if not isinstance(ident, str) or not ident:
        raise LoadError(f'{where}: "id" must be a non-empty string, got {_yaml_type(ident)}')
    name = _scalar_text(node, "name", item.get("name"))
    if "name" not in item:
        raise LoadError(f'{where}: missing "name"')
    if not isinstance(name, str) or not name.strip():
        raise LoadError(f'{where}: "name" must be a non-empty string, got {_yaml_type(name)}')
    disabled = item.get("disabled", False)
    if disabled is None:
        disabled = False
    if not isinstance(disabled, bool):
        raise LoadError(f'{where}: "disabled" must be true or false, got {_yaml_type(disabled)}')
    return PluginEntry(
        id=ident, name=name.strip(), config=item.get("config"), disabled=disabled, line=line
    )


def load_config_file(path: str | os.PathLike[str]) -> list[PluginEntry]:
    """Read and validate a YAML plugin list from ``path``."""
    source = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise LoadError(f"{source}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise LoadError(f"{source}: not valid UTF-8 ({exc.reason})") from None
    return parse_config(text, source=source)


# -- plugin resolution ----------------------------------------------------------------------------


class _ResolveError(Exception):
    pass


def _is_path_like(name: str) -> bool:
    return (
        name.endswith(".py")
        or name.startswith(("./", "../", "/", ".\\", "..\\"))
        or os.path.isabs(name)
    )


def _import_file(path: Path) -> ModuleType:
    # A fresh, unique module name per load: two config files may both have a "plugin.py", and a
    # reload after editing the file must not get the cached module.
    stem = re.sub(r"\W", "_", path.stem) or "plugin"
    mod_name = f"_dsh_plugin_{stem}_{next(_module_counter)}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise _ResolveError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered before exec so dataclasses/msgspec can resolve the module while it runs.
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(mod_name, None)
        if isinstance(exc, Exception):
            raise _ResolveError(f"{path.name}: {_describe(exc, with_type=True)}") from exc
        raise
    return module


def _resolve_file(name: str, base_dir: Path) -> object:
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    candidates = [path]
    if path.suffix != ".py":
        candidates += [path.with_name(path.name + ".py"), path / "__init__.py"]
    for candidate in candidates:
        if candidate.is_file():
            return _import_file(candidate.resolve())
    raise _ResolveError(f'plugin file "{name}" not found (looked in {base_dir})')


def _entry_point(name: str) -> importlib.metadata.EntryPoint | None:
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep
    return None


def _import_dotted(name: str) -> object:
    module_name, _, attr = name.partition(":")
    try:
        obj: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        # Only "this very module (or a parent package) does not exist" means an unknown name;
        # a missing dependency *inside* the module is an import failure worth reporting as such.
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise _ResolveError(
                f'unknown plugin name "{name}" (not a module, entry point or .py file)'
            ) from None
        raise _ResolveError(f'cannot import "{name}": {_describe(exc, with_type=True)}') from exc
    except MissingExtra as exc:  # an optional dependency: say which extra, in one line
        raise _ResolveError(str(exc)) from None
    except Exception as exc:
        raise _ResolveError(f'cannot import "{name}": {_describe(exc, with_type=True)}') from exc
    for part in filter(None, attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise _ResolveError(f'"{module_name}" has no attribute "{attr}"') from None
    return obj


def resolve_plugin(name: str, *, base_dir: str | os.PathLike[str] | None = None) -> object:
    """Resolve a plugin ``name`` to a plugin object.

    In order: a ``.py`` file (or ``./``-relative path) against ``base_dir``; a short name from
    the ``dsh.plugins`` entry-point group; a dotted module path (optionally ``module:attr``).
    Raises ``LoadError`` (without an entry id) on failure.
    """
    try:
        return _resolve(name, Path(base_dir) if base_dir is not None else Path.cwd())
    except _ResolveError as exc:
        raise LoadError(str(exc)) from exc.__cause__


def _resolve(name: str, base_dir: Path) -> object:
    if _is_path_like(name):
        obj = _resolve_file(name, base_dir)
    elif (ep := _entry_point(name)) is not None:
        try:
            obj = ep.load()
        except MissingExtra as exc:  # an optional dependency: say which extra, in one line
            raise _ResolveError(str(exc)) from None
        except Exception as exc:
            raise _ResolveError(
                f'cannot load "{name}" ({ep.value}): {_describe(exc, with_type=True)}'
            ) from exc
    elif _MODULE_RE.fullmatch(name):
        obj = _import_dotted(name)
    else:
        raise _ResolveError(f'unknown plugin name "{name}" (not a module, entry point or .py file)')
    if getattr(obj, "apply", None) is None and not isinstance(obj, type):
        raise _ResolveError(f'"{name}" is not a plugin (it has no apply())')
    return obj


# -- loading --------------------------------------------------------------------------------------


async def load_plugins(
    ctx: Context,
    source: str | os.PathLike[str] | Sequence[PluginEntry],
    *,
    base_dir: str | os.PathLike[str] | None = None,
) -> list[LoadedPlugin]:
    """Load a plugin list into ``ctx`` in order and return the enabled entries with their fibers.

    ``source`` is a config file path (``base_dir`` then defaults to its folder) or already parsed
    entries (``base_dir`` defaults to the working directory). Entries may wait for services that
    later entries provide; whatever still waits at the end is reported by
    :func:`pending_entries`. On any failure every plugin this call loaded is disposed again and
    :class:`LoadError` is raised.
    """
    if isinstance(source, (str, os.PathLike)):
        entries: Sequence[PluginEntry] = load_config_file(source)
        root = Path(base_dir) if base_dir is not None else Path(source).resolve().parent
    else:
        entries = source
        root = Path(base_dir) if base_dir is not None else Path.cwd()
    loaded: list[LoadedPlugin] = []
    reported: set[int] = set()
    try:
        for entry in entries:
            if entry.disabled:
                continue
            try:
                plugin = _resolve(entry.name, root)
            except _ResolveError as exc:
                raise LoadError(f'plugin "{entry.id}": {exc}') from exc.__cause__
            try:
                fiber = await ctx.plugin(plugin, entry.config)
            except UnknownKeyError as exc:
                raise LoadError(exc.in_plugin(entry.id)) from exc
            except Exception as exc:
                raise LoadError(f'plugin "{entry.id}": {_plugin_failure(plugin, exc)}') from exc
            loaded.append(LoadedPlugin(entry, fiber))
            # An earlier entry that was waiting may just have been applied by this one, and
            # failed: that failure belongs to the earlier entry.
            for item in loaded:
                if item.fiber.state == "failed" and id(item.fiber) not in reported:
                    reported.add(id(item.fiber))
                    error = item.fiber.error
                    assert error is not None
                    raise LoadError(
                        f'plugin "{item.entry.id}": {_plugin_failure(item.fiber.plugin, error)}'
                    ) from error
    except BaseException:
        # All or nothing: do not leave half a composition running behind a raised error.
        for item in reversed(loaded):
            await item.fiber.dispose()
        raise
    return loaded


def pending_entries(loaded: Sequence[LoadedPlugin]) -> list[PendingEntry]:
    """Entries whose plugin still waits for injected services, with the missing names."""
    return [
        PendingEntry(item.entry, item.fiber, tuple(item.fiber.missing()))
        for item in loaded
        if item.fiber.state == "pending"
    ]


def format_pending(pending: Sequence[PendingEntry]) -> str:
    """One line describing waiting entries, e.g. for a startup warning."""
    return "; ".join(
        f'plugin "{p.entry.id}" ({p.entry.name}) is waiting for service(s): ' + ", ".join(p.missing)
        for p in pending
    )


# -- messages -------------------------------------------------------------------------------------

# Exception types whose message alone is cryptic ("'x'", "list index out of range"); their
# class name is kept in the one-line report.
_NAME_WORTHY = (LookupError, AttributeError, TypeError, NameError, AssertionError, ImportError)


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _describe(exc: BaseException, *, with_type: bool = False) -> str:
    text = _one_line(str(exc))
    if not text:
        return type(exc).__name__
    if with_type or isinstance(exc, _NAME_WORTHY):
        return f"{type(exc).__name__}: {text}"
    return text


def _plugin_failure(plugin: object, exc: BaseException) -> str:
    name = getattr(plugin, "name", None)
    if not isinstance(name, str) or not name:
        name = getattr(plugin, "__name__", "plugin")
    # Plugins conventionally prefix their own errors ("time-context: ..."); do not double it,
    # nor put the exception's class name in front of a message that already names the plugin.
    own = _one_line(str(exc))
    if own.startswith(f"{name}:"):
        return own
    text = _describe(exc)
    return f"{name}: {text}"


def _quote(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _yaml_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__
