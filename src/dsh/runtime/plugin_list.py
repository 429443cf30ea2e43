"""The YAML plugin list: parsing and validating ``[{id, name, config?, disabled?}, ...]``.

This module owns turning a config file's text into :class:`PluginEntry` values, and the
one-line :class:`LoadError` every loading failure raises. Parsing is deliberately defensive
because config files may come from anywhere: ``yaml.SafeLoader`` refuses custom tags (``!!js``,
``!!python/object``), duplicate mapping keys are refused instead of silently keeping the last
one, and a document whose alias expansion would be huge (a "billion laughs" bomb) is refused
after composing the node graph, before anything expands it.

What a hostile file can cost is bounded before and while it is parsed: a file over
``MAX_CONFIG_BYTES`` is refused before it is read in full, and composing stops at the
``MAX_NODES``-th node or the ``MAX_FLOW_DEPTH``-th nested collection (a 2.9 MB file of 200,000
keys took 36 s to be refused, wrongly, as an alias bomb). Parsing uses libyaml's C scanner and
parser when PyYAML has it (about six times faster than the pure-Python one, which stays the
fallback), with the composer and constructor in Python so the bounds apply to either.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import SafeConstructor
from yaml.events import CollectionStartEvent
from yaml.resolver import Resolver

_CParser: Any
try:
    _CParser = importlib.import_module("yaml._yaml").CParser
except ImportError:  # PyYAML built without libyaml: the pure-Python loader below
    _CParser = None

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_EXPANDED_NODES",
    "MAX_FLOW_DEPTH",
    "MAX_NODES",
    "LoadError",
    "PluginEntry",
    "load_config_file",
    "one_line",
    "parse_config",
]

# Upper bound on the number of YAML nodes a document may expand to once aliases are followed.
# A hand-written plugin list is a few hundred nodes; a billion-laughs bomb is ~10^9.
MAX_EXPANDED_NODES = 100_000

# Upper bound on nested flow collections (``[[[...`` / ``{a: {b: ...``). PyYAML's scanner does
# work proportional to the flow depth for every token, so a few hundred nested ``[`` cost a
# second before the composer's recursion limit refuses the document; this refuses it at once.
MAX_FLOW_DEPTH = 64

# A config file larger than this is refused before it is read in full. Hand-written plugin lists
# are a few kilobytes; a system prompt inlined in one may be tens.
MAX_CONFIG_BYTES = 1 << 20
_LIMIT_TEXT = "1 MiB"

# Nodes a document may have before aliases are followed (each costs tens of microseconds to
# compose and construct; a plugin list has a few hundred).
MAX_NODES = 10_000

_ENTRY_KEYS = ("id", "name", "config", "disabled")


class LoadError(Exception):
    """A config file or plugin entry failed to load. ``str(err)`` is one line."""


@dataclass(frozen=True)
class PluginEntry:
    """One entry of a plugin list. ``line`` is the 1-based line in the config file, if any."""

    id: str
    name: str
    # Any until its readers (cli, compose, acp) narrow it: they read it as a mapping.
    config: Any = None
    disabled: bool = False
    line: int | None = None


class _Bounded(Composer):
    """The composer, stopping at the ``MAX_NODES``-th node and the ``MAX_FLOW_DEPTH``-th nested
    collection (block or flow), as soon as it reaches them."""

    _nodes = 0
    _depth = 0
    peek_event: Callable[[], Any]
    check_event: Callable[..., bool]

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise ComposerError(
                None,
                None,
                f"document has more than {MAX_NODES} nodes (a plugin list needs a few hundred); refused",
                self.peek_event().start_mark,
            )
        if not self.check_event(CollectionStartEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_FLOW_DEPTH:
                event = self.peek_event()
                kind = "flow collections" if getattr(event, "flow_style", False) else "collections"
                raise ComposerError(
                    None, None, f"{kind} nested more than {MAX_FLOW_DEPTH} deep; refused", event.start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _NoDuplicates(SafeConstructor):
    """SafeConstructor that refuses duplicate mapping keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, object]:
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


class _SafeLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, _Bounded, _NoDuplicates, Resolver):
    """The pure-Python safe loader, bounded, refusing duplicate keys; its scanner also refuses
    deeply nested flow collections at once (it does work proportional to the depth per token)."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)

    def fetch_flow_collection_start(self, TokenClass: type[yaml.tokens.Token]) -> None:
        if self.flow_level >= MAX_FLOW_DEPTH:
            raise yaml.scanner.ScannerError(
                None,
                None,
                f"flow collections nested more than {MAX_FLOW_DEPTH} deep; refused",
                self.get_mark(),
            )
        super().fetch_flow_collection_start(TokenClass)


def _loader(text: str) -> Any:
    """libyaml's scanner and parser with the bounded Python composer and constructor, or the
    pure-Python loader when PyYAML has no libyaml."""
    if _CParser is None:
        return _SafeLoader(text)
    return _FastLoader(text)


if _CParser is not None:

    class _FastLoader(_CParser, _Bounded, _NoDuplicates, Resolver):  # type: ignore[misc]
        # The Python composer over libyaml's events (CParser's own composer has no bounds).
        get_single_node = Composer.get_single_node
        compose_document = Composer.compose_document
        compose_node = _Bounded.compose_node
        compose_scalar_node = Composer.compose_scalar_node
        compose_sequence_node = Composer.compose_sequence_node
        compose_mapping_node = Composer.compose_mapping_node

        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)


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
            return LoadError(f"{source}: line {mark.line + 1}: {one_line(text)}")
        return LoadError(f"{source}: {one_line(text)}")
    return LoadError(f"{source}: {one_line(str(exc)) or type(exc).__name__}")


def parse_config(text: str, *, source: str = "<config>") -> list[PluginEntry]:
    """Parse and validate the text of a plugin list. ``source`` names it in error messages."""
    if len(text) > MAX_CONFIG_BYTES:
        raise _too_large(source, len(text.encode("utf-8", "surrogatepass")))
    loader = _loader(text)
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
        with Path(path).open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size > MAX_CONFIG_BYTES:
                raise _too_large(source, size)
            data = file.read(MAX_CONFIG_BYTES + 1)  # a FIFO or device: never more than this
    except OSError as exc:
        raise LoadError(f"{source}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise _too_large(source, None)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LoadError(f"{source}: not valid UTF-8 ({exc.reason})") from None
    return parse_config(text, source=source)


def _too_large(source: str, size: int | None) -> LoadError:
    what = f" {size:,} bytes," if size is not None else ""
    return LoadError(f"{source}: config file is{what} over the {_LIMIT_TEXT} limit; refused")


def one_line(text: str) -> str:
    """``text`` with its non-blank lines joined by ``"; "`` (error messages stay one line)."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


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
