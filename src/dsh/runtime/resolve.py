"""Resolving a plugin ``name`` from a plugin list to a plugin object.

This module owns the three ways a name is found, in order: a ``.py`` file (or ``./``-relative
path), a short name from the ``dsh.plugins`` entry-point group, and a dotted module path
(optionally ``module:attr``); each failure is one line naming the cause.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import itertools
import os
import re
import sys
from pathlib import Path
from types import ModuleType

from dsh._extras import MissingExtra
from dsh.runtime.plugin_list import LoadError, one_line

__all__ = ["ENTRY_POINT_GROUP", "ResolveError", "describe", "resolve", "resolve_plugin"]

ENTRY_POINT_GROUP = "dsh.plugins"

_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][\w.]*)?")
_module_counter = itertools.count(1)

# Exception types whose message alone is cryptic ("'x'", "list index out of range"); their
# class name is kept in the one-line report.
_NAME_WORTHY = (LookupError, AttributeError, TypeError, NameError, AssertionError, ImportError)


def describe(exc: BaseException, *, with_type: bool = False) -> str:
    """``exc`` in one line; with its class name when asked or when the message alone is cryptic."""
    text = one_line(str(exc))
    if not text:
        return type(exc).__name__
    if with_type or isinstance(exc, _NAME_WORTHY):
        return f"{type(exc).__name__}: {text}"
    return text


class ResolveError(Exception):
    """A name that does not resolve; the loader prefixes the entry id."""


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
        raise ResolveError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered before exec so dataclasses/msgspec can resolve the module while it runs.
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(mod_name, None)
        if isinstance(exc, Exception):
            raise ResolveError(f"{path.name}: {describe(exc, with_type=True)}") from exc
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
    raise ResolveError(f'plugin file "{name}" not found (looked in {base_dir})')


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
            raise ResolveError(
                f'unknown plugin name "{name}" (not a module, entry point or .py file)'
            ) from None
        raise ResolveError(f'cannot import "{name}": {describe(exc, with_type=True)}') from exc
    except MissingExtra as exc:  # an optional dependency: say which extra, in one line
        raise ResolveError(str(exc)) from None
    except Exception as exc:
        raise ResolveError(f'cannot import "{name}": {describe(exc, with_type=True)}') from exc
    for part in filter(None, attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ResolveError(f'"{module_name}" has no attribute "{attr}"') from None
    return obj


def resolve_plugin(name: str, *, base_dir: str | os.PathLike[str] | None = None) -> object:
    """Resolve a plugin ``name`` to a plugin object.

    In order: a ``.py`` file (or ``./``-relative path) against ``base_dir``; a short name from
    the ``dsh.plugins`` entry-point group; a dotted module path (optionally ``module:attr``).
    Raises ``LoadError`` (without an entry id) on failure.
    """
    try:
        return resolve(name, Path(base_dir) if base_dir is not None else Path.cwd())
    except ResolveError as exc:
        raise LoadError(str(exc)) from exc.__cause__


def resolve(name: str, base_dir: Path) -> object:
    """:func:`resolve_plugin` raising :class:`ResolveError` (without an entry id)."""
    if _is_path_like(name):
        obj = _resolve_file(name, base_dir)
    elif (ep := _entry_point(name)) is not None:
        try:
            obj = ep.load()
        except MissingExtra as exc:  # an optional dependency: say which extra, in one line
            raise ResolveError(str(exc)) from None
        except Exception as exc:
            raise ResolveError(
                f'cannot load "{name}" ({ep.value}): {describe(exc, with_type=True)}'
            ) from exc
    elif _MODULE_RE.fullmatch(name):
        obj = _import_dotted(name)
    else:
        raise ResolveError(f'unknown plugin name "{name}" (not a module, entry point or .py file)')
    if getattr(obj, "apply", None) is None and not isinstance(obj, type):
        raise ResolveError(f'"{name}" is not a plugin (it has no apply())')
    return obj
