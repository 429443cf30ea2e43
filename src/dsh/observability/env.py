"""Whether the composition mounts tracing: :func:`maybe_mount`, which every composition calls
(through :func:`dsh.compose.mount_spine` and the reminder worker). It reads the environment and
imports the plugin only when tracing is on, so startup pays nothing for it otherwise.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import TYPE_CHECKING

from dsh.observability import enabled_by_env

if TYPE_CHECKING:
    from dsh.runtime import Context

__all__ = ["maybe_mount"]

log = logging.getLogger("dsh.telemetry")


async def maybe_mount(ctx: Context) -> None:
    """Mount the ``telemetry`` plugin on ``ctx`` when the environment asks for tracing and the
    composition does not mount it already. Without the extra: one warning line, no tracing."""
    if ctx.has("telemetry") or not enabled_by_env():
        return
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        log.warning("telemetry: OTEL_EXPORTER_OTLP_ENDPOINT is set but dsh[otel] is not installed; no traces")
        return
    from dsh.observability import plugin

    await ctx.plugin(plugin, {})
