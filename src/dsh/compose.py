"""The composition root: which plugins make up the agent spine, and which session store to mount.

Every front end assembles dsh here, so the choices are written once:

- :func:`mount_spine` mounts the agent spine (live sessions, LLM service, tools, system prompt,
  agent registry, then an optional store, then the agent loop), reusing whatever a composition
  already provides. ``dsh.testing``, the stdio app and the library API (``dsh.Agent``) use it.
- :func:`store_entry` turns a store spec into the plugin entry that mounts it: a JSONL root
  folder, ``sqlite:///FILE``, a ``postgresql://`` DSN. :func:`mount_store` mounts a spec or a
  ready store object; :func:`open_store` opens the store a set of command-line options (or a
  config file's store plugin) selects, for ``dsh sessions`` and ``--continue``.
- :data:`DEFAULT_TIME_CONTEXT` is time-context's config in the default compositions of
  ``dsh chat``, ``dsh run`` and ``dsh acp`` (the zone line and the gap since the last exchange),
  and :func:`prompt_zone_config` the zone their prompts carry (``--time-zone``, else the process
  zone); ``dsh.Agent`` keeps the plugin's own defaults.

Plugins are named by their short names and resolved through the loader, so a store backend is
imported only when it is chosen.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dsh.apps.home import PATH_KEYS, default_root, resolve_config_paths
from dsh.errors import UsageError
from dsh.persistence.base import SESSION_STORE  # the mounted store's key, re-exported
from dsh.runtime import Context, Fiber
from dsh.runtime.loader import PluginEntry, load_config_file, load_plugins, resolve_plugin

if TYPE_CHECKING:
    from dsh.persistence.base import SessionStore

__all__ = [
    "APP_NAMES",
    "DEFAULT_ROOT",
    "DEFAULT_TIME_CONTEXT",
    "SESSION_STORE",
    "STORE_NAMES",
    "OpenedStore",
    "app_store_entry",
    "mount_rewind",
    "mount_spine",
    "mount_store",
    "open_store",
    "prompt_zone_config",
    "store_entry",
]


DEFAULT_ROOT = "./.sessions"
# The keyless model of the default composition.
ECHO_MODEL = "mock-echo"
APP_NAMES = frozenset({"stdio-app", "dsh.apps.stdio"})
# Store plugin names (short and module form) and the store kind each one mounts.
STORE_NAMES: Mapping[str, str] = {
    "jsonl-sessions": "jsonl",
    "dsh.persistence.jsonl": "jsonl",
    "sqlite-sessions": "sqlite",
    "dsh.persistence.sqlite": "sqlite",
    "postgres-sessions": "postgres",
    "dsh.persistence.postgres": "postgres",
}
DEFAULT_TIME_CONTEXT: Mapping[str, object] = {"zoneLine": True, "stepOneBaseline": "previousExchange"}
"""time-context's config in the default compositions, as the reference's web overlay mounts it."""
_SQLITE_PREFIX = "sqlite:///"
_POSTGRES_PREFIXES = ("postgresql://", "postgres://")


# -- the spine -------------------------------------------------------------------------------


async def mount_spine(
    ctx: Context,
    *,
    tool_order: list[str] | None = None,
    loop_config: Mapping[str, object] | None = None,
    store: PluginEntry | SessionStore | None = None,
    store_base_dir: str | os.PathLike[str] | None = None,
) -> list[Fiber]:
    """Mount the agent spine on ``ctx``; returns the fibers it mounted, in order.

    Services the composition already provides are reused (a config may mount its own tools
    registry or store). ``store`` is mounted before the loop, so a resume finds it; without one
    nothing is persisted.
    """
    # Imported here: `dsh sessions` and other store-only users never load the agent spine.
    from dsh.agent import agent as agents_plugin
    from dsh.agent import loop as loop_plugin
    from dsh.agent import sessions as sessions_plugin
    from dsh.agent import system_prompt as system_prompt_plugin
    from dsh.llm import service as llm_plugin
    from dsh.observability.env import maybe_mount as mount_telemetry
    from dsh.tools import registry as tools_plugin

    # Tracing when OTEL_EXPORTER_OTLP_ENDPOINT asks for it (or a config mounts `telemetry`).
    await mount_telemetry(ctx)
    fibers: list[Fiber] = []
    for plugin, service, config in (
        (sessions_plugin, "sessions", None),
        (llm_plugin, "llm", None),
        (tools_plugin, "tools", {"toolOrder": tool_order} if tool_order else None),
        (system_prompt_plugin, "system_prompt", None),
        (agents_plugin, "agents", None),
    ):
        if not ctx.has(service):
            fibers.append(await ctx.plugin(plugin, config))
    if store is not None and not ctx.has(SESSION_STORE):
        fibers.append(await mount_store(ctx, store, base_dir=store_base_dir))
    if not ctx.has("agent_loop"):
        fibers.append(await ctx.plugin(loop_plugin, dict(loop_config or {})))
    return fibers


def prompt_zone_config(flag: str | None, *, process_default: bool) -> dict[str, object]:
    """The app's ``timeZone`` (the zone every prompt carries): ``--time-zone`` when given
    (refused in one line unless UTC or an IANA Area/Location name), else the process zone when
    ``process_default`` (the default composition: the terminal's user is where the process is;
    nothing when that zone has no such name), else nothing (a config decides)."""
    from dsh import _zones

    if flag is not None:
        zone = _zones.canonical_client_zone(flag)
        if zone is None:
            raise UsageError(_zones.client_zone_error("--time-zone", flag))
        return {"timeZone": zone}
    if process_default:
        local = _zones.local_client_zone()
        return {"timeZone": local} if local is not None else {}
    return {}


async def mount_rewind(ctx: Context, config: Mapping[str, object] | None = None) -> Fiber:
    """Mount the ``rewind`` plugin (workspace snapshots before file-changing steps)."""
    from dsh.rewind import plugin as rewind_plugin  # git-backed: loaded only when mounted

    return await ctx.plugin(rewind_plugin, dict(config or {}))


# -- stores ----------------------------------------------------------------------------------


def store_entry(spec: str | os.PathLike[str], *, base_dir: str | os.PathLike[str] | None = None) -> PluginEntry:
    """The plugin entry for a store spec.

    ``postgresql://…`` (or ``postgres://…``) is a PostgreSQL DSN; ``sqlite:///FILE`` a SQLite
    database (``sqlite:///rel.db`` relative, ``sqlite:////abs/path.db`` absolute, as in
    SQLAlchemy); anything without a scheme a JSONL root folder. Relative paths are resolved
    against ``base_dir`` (default: the working directory). Another scheme is a
    :class:`UsageError`.
    """
    text = os.fspath(spec)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    if not text:
        raise UsageError("empty store: give a folder, sqlite:///FILE or postgresql://…")
    if text.startswith(_POSTGRES_PREFIXES):
        return PluginEntry("store", "postgres-sessions", {"dsn": text})
    if text.startswith("sqlite:"):
        if not text.startswith(_SQLITE_PREFIX) or len(text) == len(_SQLITE_PREFIX):
            raise UsageError(f'store "{text}": a SQLite store is sqlite:///FILE')
        return PluginEntry("store", "sqlite-sessions", {"path": str(_resolve(base, text[len(_SQLITE_PREFIX) :]))})
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise UsageError(
            f'store "{text}": unknown scheme "{scheme}" (use a folder, sqlite:///FILE or postgresql://…)'
        )
    return PluginEntry("store", "jsonl-sessions", {"root": str(_resolve(base, text))})


def resolve_entry_paths(entry: PluginEntry, base: Path) -> PluginEntry:
    """``entry`` with the relative paths of its config resolved against ``base`` (the config
    file's folder), as its ``.py`` plugin names are."""
    if entry.name not in PATH_KEYS:
        return entry
    config = resolve_config_paths(entry.name, entry.config, base)
    return PluginEntry(entry.id, entry.name, config, entry.disabled, entry.line)


def app_store_entry(kind: str, persistence_root: str, sqlite_path: str | None = None) -> PluginEntry:
    """The store the stdio app mounts from its own config (``store``, ``persistenceRoot``,
    ``sqlitePath``), with paths resolved against the working directory."""
    root = Path(persistence_root).expanduser().resolve()
    if kind == "jsonl":
        return PluginEntry("store", "jsonl-sessions", {"root": str(root)})
    if kind == "sqlite":
        path = Path(sqlite_path).expanduser().resolve() if sqlite_path else root / "sessions.sqlite3"
        return PluginEntry("store", "sqlite-sessions", {"path": str(path)})
    raise UsageError(f'stdio-app: store must be "jsonl" or "sqlite", got "{kind}"')


def _resolve(base: Path, path: str) -> Path:
    return (base / Path(path).expanduser()).resolve()


@dataclass(frozen=True)
class _StoreObject:
    """A plugin that mounts an already built store object (``dsh.Agent(store=JsonlStore(...))``).

    The caller keeps ownership: disposing the plugin releases the sessions it opened but does
    not close the store.
    """

    store: SessionStore
    name: str = "session-store"

    def apply(self, ctx: Context, config: object = None) -> None:
        from dsh.persistence.coordinator import mount_coordinator

        ctx.provide(SESSION_STORE, self.store)
        mount_coordinator(ctx, self.store, close_store=False)


async def mount_store(
    ctx: Context,
    store: str | os.PathLike[str] | PluginEntry | SessionStore,
    *,
    base_dir: str | os.PathLike[str] | None = None,
) -> Fiber:
    """Mount a store (a spec, a plugin entry, or a store object) as ``ctx.session_store``."""
    if isinstance(store, (str, os.PathLike)):
        store = store_entry(store, base_dir=base_dir)
    if isinstance(store, PluginEntry):
        plugin = resolve_plugin(store.name, base_dir=base_dir)
        return await ctx.plugin(plugin, store.config)
    from dsh.persistence.base import SessionStore

    if not isinstance(store, SessionStore):
        raise TypeError(
            f"store must be a folder, sqlite:///FILE, postgresql://… or a SessionStore, not {type(store).__name__}"
        )
    return await ctx.plugin(_StoreObject(store))


@dataclass(frozen=True)
class OpenedStore:
    """A store opened for reading or importing; ``close()`` disposes what was mounted."""

    store: SessionStore
    ctx: Context

    async def close(self) -> None:
        await self.ctx.dispose()


def choose_store(
    *,
    kind: str | None = None,
    root: str | None = None,
    sqlite: str | None = None,
    dsn: str | None = None,
    config: str | None = None,
    check: Callable[[str | None, str | None], None] | None = None,
) -> tuple[PluginEntry, Path | None]:
    """The store plugin entry the options name, and the folder its relative paths resolve in.

    ``kind`` is ``jsonl``, ``sqlite`` or ``postgres`` (default ``jsonl``, or whatever the config
    file's store plugin or stdio-app entry selects when ``config`` is given and ``kind`` is not).
    ``check(kind, mounted)`` sees the decision before anything opens (``mounted``: the id of the
    config's own store plugin), so a caller can refuse flags that store would ignore.
    """
    base = Path(config).resolve().parent if config else None
    if config and not kind:
        assert base is not None
        entries = [resolve_entry_paths(e, base) for e in load_config_file(config) if not e.disabled]
        stores = [e for e in entries if e.name in STORE_NAMES]
        apps = [e for e in entries if e.name in APP_NAMES]
        if stores:
            if check is not None:
                check(None, stores[-1].id)
            return stores[-1], base
        if apps:
            # The app's own store, with its paths resolved as the app resolves them (cwd).
            app = apps[0].config or {}
            kind = app.get("store", "jsonl")
            root = root or app.get("persistenceRoot")
            sqlite = sqlite or app.get("sqlitePath")
    kind = kind or "jsonl"
    if check is not None:
        check(kind, None)
    if kind == "postgres":
        return PluginEntry("store", "postgres-sessions", {"dsn": dsn} if dsn else {}), base
    return app_store_entry(kind, root or str(default_root()), sqlite), base


async def open_store(
    *,
    kind: str | None = None,
    root: str | None = None,
    sqlite: str | None = None,
    dsn: str | None = None,
    config: str | None = None,
    check: Callable[[str | None, str | None], None] | None = None,
) -> OpenedStore:
    """The store the ``sessions`` commands (and ``--continue``) read: :func:`choose_store`'s
    choice, mounted on a context of its own."""
    entry, base = choose_store(kind=kind, root=root, sqlite=sqlite, dsn=dsn, config=config, check=check)
    ctx = Context()
    await load_plugins(ctx, [entry], base_dir=base)
    return OpenedStore(ctx.require(SESSION_STORE), ctx)
