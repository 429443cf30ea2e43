"""The MCP servers an ACP client passes for one session (``mcpServers`` of ``session/new``,
``session/load`` and ``session/resume``).

They are connected through dsh's MCP client (:func:`dsh.plugins.mcp.plugin.connect`) for the
session's agent alone: their tools are registered for its agent id, so only that session's
requests list them and only its calls reach them. Another session of the same process never sees
them and may use the same server names. Model-visible names are the usual
``mcp__<server>__<tool>``. The servers stop (stdio: their process group ends) when the session is
closed, when a load or resume passes a different list, and when the process exits.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from acp import schema

from dsh.apps.acp.mapping import invalid_params
from dsh.plugins.mcp.config import Config, ServerSpec, spec_from_config
from dsh.plugins.mcp.plugin import Mount, connect
from dsh.runtime.config import ConfigError
from dsh.tools.registry import ToolRegistry

__all__ = ["ClientServers", "McpServer", "checked", "connect_for"]

log = logging.getLogger("dsh.acp")

McpServer: TypeAlias = schema.HttpMcpServer | schema.SseMcpServer | schema.AcpMcpServer | schema.McpServerStdio
"""An ``mcpServers`` entry as the acp package parses it."""

SOURCE = "the ACP client"


def checked(servers: Sequence[McpServer] | None) -> list[McpServer]:
    """The client's list; a transport dsh does not speak is a ``-32602`` error, raised before the
    session exists."""
    out = list(servers or ())
    for server in out:
        if not isinstance(server, (schema.McpServerStdio, schema.McpServerHttp)):
            kind = "sse" if isinstance(server, schema.McpServerSse) else "acp"
            raise invalid_params(
                f'MCP server "{server.name}": transport "{kind}" is not supported (stdio and http are)'
            )
    return out


def _spec(server: McpServer) -> ServerSpec:
    if isinstance(server, schema.McpServerStdio):
        config = Config(
            server_name=server.name,
            command=server.command,
            args=list(server.args),
            env={e.name: e.value for e in server.env},
        )
    elif isinstance(server, schema.McpServerHttp):
        config = Config(server_name=server.name, url=server.url, headers={h.name: h.value for h in server.headers})
    else:  # refused by checked()
        raise ConfigError(f'MCP server "{server.name}": unsupported transport')
    return spec_from_config(config, source=SOURCE)


@dataclass
class ClientServers:
    """One session's client servers: the list the client passed and their connections."""

    requested: list[McpServer]
    mount: Mount | None = None

    async def close(self) -> None:
        mount, self.mount = self.mount, None
        if mount is not None:
            await mount.close()


async def connect_for(registry: ToolRegistry, agent_id: str, servers: list[McpServer]) -> ClientServers:
    """Connect ``servers`` for agent ``agent_id`` alone; returns once each is up or has failed.

    A server that cannot start (or has a bad name) logs one warning line on stderr and the session
    runs without it, as ``dsh chat`` does with a broken ``.mcp.json`` entry.
    """
    specs: list[ServerSpec] = []
    for server in servers:
        try:
            specs.append(_spec(server))
        except (ValueError, ConfigError) as exc:
            log.warning('acp: MCP server "%s" not connected: %s', server.name, exc)
    found = ClientServers(servers)
    if specs:
        try:
            found.mount = await connect(registry, specs, agent_id=agent_id, skip_taken=True)
        except Exception as exc:
            log.warning("acp: MCP servers not connected: %s", exc)
    return found
