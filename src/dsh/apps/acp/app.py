"""acp-app: the agent spine, a session store and the agent loop for ``dsh acp``.

The ACP counterpart of ``stdio-app``: it mounts what that app mounts (reusing its spine and store
choice) but no agent; :mod:`.server` creates one agent per ACP session. ``dsh acp`` puts it in
place of the composition's ``stdio-app`` entry, with that entry's config.
"""

from __future__ import annotations

import msgspec

from dsh import _zones
from dsh.agent import loop as loop_plugin
from dsh.agent.system_prompt import SYSTEM_PROMPT
from dsh.apps.store_check import check_writable
from dsh.compose import app_store_entry, mount_spine
from dsh.persistence.base import SESSION_STORE
from dsh.runtime import Context, ServiceKey
from dsh.runtime.loader import PluginEntry

__all__ = ["ACP_APP", "Config", "apply", "name", "swap_app"]

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
    # A prompt's zone when its _meta names none (stdio-app's key of the same name).
    time_zone: str | None = None


ACP_APP: ServiceKey[Config] = ServiceKey("acp_app")
"""The ``acp-app`` entry's config, for ``dsh acp`` to serve with (``ctx.get(ACP_APP)``)."""

# stdio-app keys that mean nothing without a terminal or a single agent.
STDIO_ONLY = frozenset({"welcome", "plain", "historyFile", "resumeSessionId", "compactionOff"})


async def apply(ctx: Context, config: Config) -> None:
    config.time_zone = _zones.checked_config_zone(name, config.time_zone)
    # The same spine as stdio-app (compose.mount_spine reuses what the composition mounted).
    await mount_spine(
        ctx,
        tool_order=config.tool_order,
        loop_config={"maxStepsPerTurn": config.max_steps_per_turn},
        store=None
        if ctx.has(SESSION_STORE)
        else app_store_entry(config.store, config.persistence_root, config.sqlite_path),
    )
    if config.persona:
        ctx.defer(ctx.require(SYSTEM_PROMPT).add_section("deployment:persona", config.persona, order=0))
    check_writable(ctx.require(SESSION_STORE))
    ctx.provide(ACP_APP, config)


def swap_app(entries: list[PluginEntry], app_names: frozenset[str]) -> list[PluginEntry]:
    """The composition with its ``stdio-app`` entries replaced by ``acp-app`` (same id and keys)."""
    out = []
    for e in entries:
        if e.name in app_names:
            config = {k: v for k, v in (e.config or {}).items() if k not in STDIO_ONLY}
            e = PluginEntry(e.id, "dsh.apps.acp.app", config, e.disabled, e.line)
        out.append(e)
    return out
