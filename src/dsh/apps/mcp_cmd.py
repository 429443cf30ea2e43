"""``dsh mcp list``: each configured MCP server, its transport, status and public tool names.

The servers are those ``dsh chat`` would mount: the ``mcp`` entries of ``--config``, or else the
discovered ``.mcp.json`` files (project and user level). Each is connected once, listed and
stopped again. A server of an untrusted project file is shown as ``untrusted`` and never
started (the trust gate's one line says how to trust it). Exit 0 when every started server
connected, 1 when one failed; an untrusted server is not a failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TypeVar

from dsh.runtime import Context
from dsh.runtime.loader import PluginEntry, load_config_file, load_plugins
from dsh.tools.registry import TOOLS

__all__ = ["MCP_NAMES", "add_parser", "run"]

MCP_NAMES = frozenset({"mcp", "dsh.plugins.mcp.plugin"})


P = TypeVar("P", bound=argparse.ArgumentParser)


def add_parser(commands: argparse._SubParsersAction[P], parser_class: type[P]) -> None:
    """Add ``dsh mcp list`` to the command parsers."""
    mcp = commands.add_parser("mcp", help="MCP servers")
    sub = mcp.add_subparsers(dest="action", required=True, parser_class=parser_class)
    listing = sub.add_parser("list", help="configured servers, their status and tools")
    listing.add_argument("--config", metavar="FILE", help="use the mcp entries of a YAML composition")
    listing.add_argument("--json", action="store_true", help="one JSON object per server")
    listing.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks and debug logs on stderr")


def _entries(args: argparse.Namespace) -> tuple[list[PluginEntry], Path | None]:
    tools = PluginEntry("tools", "dsh.tools.registry")
    if not args.config:
        return [tools, PluginEntry("mcp", "mcp", {"discover": True})], None
    path = Path(args.config)
    mounted = [e for e in load_config_file(path) if e.name in MCP_NAMES and not e.disabled]
    return [tools, *mounted], path.resolve().parent


async def run(args: argparse.Namespace) -> int:
    from dsh.plugins.mcp.plugin import servers, status_line, untrusted

    entries, base = _entries(args)
    ctx = Context()
    try:
        await load_plugins(ctx, entries, base_dir=base)
        mounted = servers(ctx.require(TOOLS))
        rows = [
            {
                "server": s.spec.name,
                "transport": s.spec.transport,
                "status": status_line(s),
                "source": s.spec.source,
                "approval": s.spec.approval,
                "tools": sorted(s.public_names),
            }
            for s in mounted
        ]
        rows += [
            {
                "server": spec.name,
                "transport": spec.transport,
                "status": "untrusted",
                "source": spec.source,
                "approval": spec.approval,
                "tools": [],
            }
            for spec in untrusted(ctx.require(TOOLS))
        ]
    finally:
        await ctx.dispose()
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
    elif not rows:
        print("no MCP servers configured (.mcp.json here, mcp.json in the dsh home, or mcp entries in --config)")
    else:
        for row in rows:
            line = f"{row['server']}  {row['transport']}  {row['status']}  ({row['approval']}, {row['source']})"
            print(line)  # a terminal gets it through the CLI's one sanitiser; a pipe as it is
            for tool in row["tools"]:
                print(f"  {tool}")
    sys.stdout.flush()
    return 0 if all(r["status"] in ("connected", "untrusted") for r in rows) else 1
