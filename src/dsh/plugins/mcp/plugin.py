"""The ``mcp`` plugin: MCP servers' tools registered on the tool registry (``TOOLS``).

One entry describes one server (``serverName`` ...), or ``discover: true`` loads every server of
the project and user ``.mcp.json`` files (see :mod:`.config`). ``apply`` connects to all of its
servers concurrently and returns once each is connected or has failed, so discovery is complete
before the first turn. A server that fails to start logs one warning line and contributes no
tools, unless ``failOnStartupError`` makes the load fail.

:func:`connect` is the same without a plugin entry, for servers that belong to one agent: their
tools are registered for that agent id alone (``dsh acp`` connects each ACP session's client
servers so), and the returned :class:`Mount` stops them when the caller is done with them.

Each tool listing replaces the server's previous generation as a whole: the new set is checked
first (a server listing one name twice is refused and the old set stays), then the old tools
are unregistered and the new ones registered; were a public name taken by someone else, the
generation is rolled back to nothing rather than left partial. Tools of a server whose
``approval`` is not ``trusted`` carry ``needs_approval=True``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dsh.plugins.mcp.config import SECRETS, Config, ServerSpec, spec_from_config
from dsh.plugins.mcp.mcp_json import discover_all
from dsh.plugins.mcp.naming import public_tool_name
from dsh.runtime.context import Context
from dsh.tools.registry import TOOLS, ToolRegistry
from dsh.tools.types import Tool, ToolCall, ToolResult, define_tool

if TYPE_CHECKING:
    # The SDK takes seconds to import on a busy machine: only load it when a server is mounted.
    import mcp_types as types

    from dsh.plugins.mcp.client import Connection
    from dsh.tools.workspace.spill import SpillStore

__all__ = ["Config", "Mount", "Server", "apply", "connect", "inject", "name", "servers"]

name = "mcp"
inject = ["tools"]

log = logging.getLogger("dsh.mcp")

# Live servers per tool registry, by (owning agent id or None, server name): a server name is
# unique among the servers one agent sees, and ``dsh mcp list`` / status lines read them here.
_LIVE: weakref.WeakKeyDictionary[ToolRegistry, dict[tuple[str | None, str], Server]] = weakref.WeakKeyDictionary()


def servers(registry: ToolRegistry, *, agent_id: str | None = None) -> list[Server]:
    """The servers mounted on ``registry`` for every agent (or for ``agent_id`` alone), in load order."""
    return [s for (owner, _), s in _LIVE.get(registry, {}).items() if owner == agent_id]


def _taken(live: dict[tuple[str | None, str], Server], server_name: str, agent_id: str | None) -> bool:
    if agent_id is None:
        # A server every agent sees must not share a name with any agent's own server.
        return any(n == server_name for _, n in live)
    return (None, server_name) in live or (agent_id, server_name) in live


@dataclass
class Server:
    """One mounted server: its spec, its connection and its registered tools."""

    spec: ServerSpec
    registry: ToolRegistry
    agent_id: str | None = None
    """The one agent that sees this server's tools; ``None``: every agent."""
    connection: Connection = field(init=False)
    public_names: dict[str, str] = field(default_factory=dict)  # public name -> raw name
    _unregister: list[Callable[[], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        from dsh.plugins.mcp.client import Connection

        self.connection = Connection(self.spec, self.replace_tools)

    def replace_tools(self, listing: list[types.Tool]) -> None:
        """Swap in a new generation of this server's tools (see the module docstring)."""
        built: dict[str, Tool] = {}
        for item in listing:
            public = public_tool_name(self.spec.name, item.name)
            if public in built:
                log.error(
                    'mcp: server "%s" listed tool "%s" more than once; keeping its previous tools',
                    self.spec.name,
                    item.name,
                )
                return
            built[public] = self._tool(public, item)
        self._drop_tools()
        try:
            for tool in built.values():
                self._unregister.append(self.registry.register(tool, agent_id=self.agent_id))
        except ValueError as exc:
            self._drop_tools()
            log.error('mcp: server "%s": %s; none of its tools are registered', self.spec.name, exc)
            return
        self.public_names = {public: item.name for public, item in zip(built, listing, strict=True)}

    def _drop_tools(self) -> None:
        for unregister in self._unregister:
            unregister()
        self._unregister.clear()
        self.public_names = {}

    def _tool(self, public: str, item: types.Tool) -> Tool:
        raw, connection = item.name, self.connection

        from dsh.plugins.mcp.results import cap_result, map_result, result_bytes

        limit = self.spec.max_result_bytes

        async def execute(args: object, call: ToolCall) -> ToolResult:
            # A model may send a bare string or null: the server then reports what it needs.
            arguments: dict[str, object] = args if isinstance(args, dict) else {}
            result = map_result(raw, await connection.call(raw, arguments, call.signal))
            if result_bytes(result) <= limit:
                return result
            # Tens of megabytes to encode and write: off the event loop.
            return await asyncio.to_thread(cap_result, result, limit, lambda full: _spill(call, full))

        schema = item.input_schema if isinstance(item.input_schema, dict) else {}
        return define_tool(
            name=public,
            description=item.description or "",
            parameters=schema or {"type": "object", "properties": {}},
            execute=execute,
            needs_approval=self.spec.needs_approval,
            read_only=bool(getattr(item.annotations, "read_only_hint", None)),  # readOnlyHint
        )

    async def close(self) -> None:
        self._drop_tools()
        await self.connection.close()
        live = _LIVE.get(self.registry)
        key = (self.agent_id, self.spec.name)
        if live is not None and live.get(key) is self:
            del live[key]


_SPILL: list[SpillStore] = []


def _spill(call: ToolCall, full: str) -> Path:
    """Save a cut result's full text in this process's private spill folder (made on first use,
    removed at exit like ``bash``'s, under the same per-call and per-session caps)."""
    from dsh.tools.workspace._common import session_id
    from dsh.tools.workspace.spill import SpillStore

    if not _SPILL:
        _SPILL.append(SpillStore(None))
    return _SPILL[0].save(session_id(call), "mcp", full)


@dataclass
class Mount:
    """Servers connected together (one plugin entry, or one agent's servers)."""

    servers: list[Server]

    async def close(self) -> None:
        """Unregister their tools and stop them (stdio: the server's process group ends)."""
        await asyncio.gather(*(s.close() for s in self.servers), return_exceptions=True)


async def connect(
    registry: ToolRegistry,
    specs: Sequence[ServerSpec],
    *,
    agent_id: str | None = None,
    skip_taken: bool = False,
) -> Mount:
    """Connect ``specs`` concurrently and register their tools, for every agent or for
    ``agent_id`` alone; returns once each server is connected or has failed.

    A server name the same agent already sees is skipped with a warning when ``skip_taken``, else
    refused (``ValueError``). A failed start logs a warning, or, for a ``failOnStartupError``
    server, stops them all and raises ``RuntimeError``.
    """
    live = _LIVE.setdefault(registry, {})
    mounted: list[Server] = []
    for spec in specs:
        if _taken(live, spec.name, agent_id) or any(s.spec.name == spec.name for s in mounted):
            if skip_taken:
                log.warning('mcp: server "%s" from %s is already mounted; skipped', spec.name, spec.source)
                continue
            raise ValueError(f'mcp: serverName "{spec.name}" is already used by another entry')
        mounted.append(Server(spec, registry, agent_id))
    for server in mounted:
        live[(agent_id, server.spec.name)] = server
    mount = Mount(mounted)
    try:
        started = await asyncio.gather(*(s.connection.start() for s in mounted))
    except BaseException:
        await mount.close()
        raise
    failed = [s for s, ok in zip(mounted, started, strict=True) if not ok]
    fatal = [s for s in failed if s.spec.fail_on_startup_error]
    if fatal:
        await mount.close()
        first = fatal[0]
        raise RuntimeError(
            f'mcp: server "{first.spec.name}" failed to start: {first.connection.reason}'
        )
    for server in failed:
        log.warning(
            'mcp: server "%s" failed to start: %s; continuing without its tools',
            server.spec.name,
            SECRETS.scrub(server.connection.reason or "unknown error"),
        )
    return mount


# Servers of untrusted project files per tool registry: never started, listed by ``dsh mcp list``.
_UNTRUSTED: weakref.WeakKeyDictionary[ToolRegistry, list[ServerSpec]] = weakref.WeakKeyDictionary()


def untrusted(registry: ToolRegistry) -> list[ServerSpec]:
    """The servers of untrusted project files a discovery on ``registry`` skipped."""
    return list(_UNTRUSTED.get(registry, []))


async def apply(ctx: Context, config: Config) -> None:
    """Connect this entry's servers and register their tools until the entry is disposed."""
    registry = ctx.require(TOOLS)
    if config.discover:
        found = discover_all(project_file=config.project_file, user_file=config.user_file)
        specs = found.specs
        if found.untrusted:
            skipped = _UNTRUSTED.setdefault(registry, [])
            skipped.extend(found.untrusted)

            def forget() -> None:
                for spec in found.untrusted:
                    if spec in skipped:
                        skipped.remove(spec)

            ctx.defer(forget)
    else:
        specs = [spec_from_config(config, source="plugin config")]
    mount = await connect(registry, specs, skip_taken=config.discover)
    ctx.defer(mount.close)


def status_line(server: Server) -> str:
    """``connected``, ``reconnecting: <reason>``, ``failed: <reason>`` ..."""
    conn = server.connection
    if conn.status == "connected":
        return "connected"
    return f"{conn.status}: {SECRETS.scrub(conn.reason or 'unknown')}" if conn.reason else conn.status


__all__ += ["status_line", "untrusted"]
