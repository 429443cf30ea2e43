"""Loading a plugin list into a ``Context`` (the reference's ``cordis.yml`` Loader).

This module owns applying the entries in file order, all or nothing, and reporting entries
still waiting for a service at the end (:func:`pending_entries`). Dependency gating is the
Context's job, so entries may appear in any order. Parsing the list lives in
:mod:`dsh.runtime.plugin_list`, resolving names in :mod:`dsh.runtime.resolve`; their public
names are re-exported here. Every failure raises :class:`LoadError` with one line naming the
file/line or the entry id and the cause.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dsh.runtime.config import UnknownKeyError
from dsh.runtime.context import Context, Fiber
from dsh.runtime.plugin_list import LoadError, PluginEntry, load_config_file, one_line, parse_config
from dsh.runtime.resolve import ENTRY_POINT_GROUP, ResolveError, describe, resolve, resolve_plugin

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
                plugin = resolve(entry.name, root)
            except ResolveError as exc:
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


def _plugin_failure(plugin: object, exc: BaseException) -> str:
    name = getattr(plugin, "name", None)
    if not isinstance(name, str) or not name:
        name = getattr(plugin, "__name__", "plugin")
    # Plugins conventionally prefix their own errors ("time-context: ..."); do not double it,
    # nor put the exception's class name in front of a message that already names the plugin.
    own = one_line(str(exc))
    if own.startswith(f"{name}:"):
        return own
    text = describe(exc)
    return f"{name}: {text}"
