"""acp-app: the agent spine, a session store and the agent loop for ``dsh acp``.

The ACP counterpart of ``stdio-app``: it mounts what that app mounts (reusing its spine and store
choice) but no agent; :mod:`.server` creates one agent per ACP session. ``dsh acp`` puts it in
place of the composition's ``stdio-app`` entry, with that entry's config.
"""

from __future__ import annotations

import msgspec

from dsh.agent import loop as loop_plugin
from dsh.apps import stdio
from dsh.apps.store_check import check_writable
from dsh.runtime import Context
from dsh.runtime.loader import PluginEntry
from dsh.tools import registry as tools_plugin

__all__ = ["Config", "apply", "name", "swap_app"]

name = "acp-app"


class Config(msgspec.Struct, rename="camel"):
    model: str
    persona: str | None = None
    persistence_root: str = "./.sessions"
    store: str = "jsonl"
    sqlite_path: str | None = None
    max_steps_per_turn: int = loop_plugin.DEFAULT_MAX_STEPS
    tool_order: list[str] | None = None
    permission_timeout_seconds: float = 600.0


# stdio-app keys that mean nothing without a terminal or a single agent.
STDIO_ONLY = frozenset({"welcome", "plain", "historyFile", "resumeSessionId"})


async def apply(ctx: Context, config: Config) -> None:
    for plugin, service in stdio._SPINE:
        if not ctx.has(service):
            await ctx.plugin(plugin)
    if not ctx.has("tools"):
        await ctx.plugin(tools_plugin, {"toolOrder": config.tool_order} if config.tool_order else None)
    if config.persona:
        ctx.defer(ctx.system_prompt.add_section("deployment:persona", config.persona, order=0))
    if not ctx.has("session_store"):
        stdio_config = stdio.Config(
            model=config.model,
            persistence_root=config.persistence_root,
            store=config.store,
            sqlite_path=config.sqlite_path,
        )
        await stdio._mount_store(ctx, stdio_config)
    check_writable(ctx.session_store)
    if not ctx.has("agent_loop"):
        await ctx.plugin(loop_plugin, {"maxStepsPerTurn": config.max_steps_per_turn})
    ctx.provide("acp_app", config)


def swap_app(entries: list[PluginEntry], app_names: frozenset[str]) -> list[PluginEntry]:
    """The composition with its ``stdio-app`` entries replaced by ``acp-app`` (same id and keys)."""
    out = []
    for e in entries:
        if e.name in app_names:
            config = {k: v for k, v in (e.config or {}).items() if k not in STDIO_ONLY}
            e = PluginEntry(e.id, "dsh.apps.acp.app", config, e.disabled, e.line)
        out.append(e)
    return out
