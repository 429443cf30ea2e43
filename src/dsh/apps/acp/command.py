"""``dsh acp``: ``dsh chat``'s composition with ``acp-app`` in place of ``stdio-app``, served.

Owns the step from parsed flags to :func:`dsh.apps.acp.serve.serve`: the entries of
:mod:`dsh.apps.entries` with the app swapped, loaded on one context, and the served options
(``--model``, the app's default model and permission timeout).
"""

from __future__ import annotations

import argparse

from dsh.apps.acp import app as acp_app
from dsh.apps.acp.serve import serve
from dsh.apps.acp.server import AcpOptions
from dsh.apps.entries import composition
from dsh.compose import APP_NAMES
from dsh.errors import UsageError
from dsh.runtime import Context
from dsh.runtime.loader import load_plugins

__all__ = ["cmd_acp"]


async def cmd_acp(args: argparse.Namespace) -> int:
    entries, base_dir = composition(args)
    ctx = Context()
    try:
        await load_plugins(ctx, acp_app.swap_app(entries, APP_NAMES), base_dir=base_dir)
        config = ctx.get(acp_app.ACP_APP)
        if config is None:
            raise UsageError("the composition has no running stdio-app entry to serve ACP with")
        options = AcpOptions(
            model=args.model,
            default_model=config.model,
            permission_timeout=config.permission_timeout_seconds,
            time_zone=config.time_zone,
        )
        await serve(ctx, options)
    finally:
        await ctx.dispose()
    return 0
