"""``python -m bench.mcp_roundtrip``: per-call cost of an MCP stdio tool beside a native tool.

Three ways of running the same trivial tool (``echo(text)`` returning ``ECHO: TEXT``), each
timed per call, one call at a time, after a warm-up:

- **native**: ``ctx.tools.execute`` of dsh's built-in ``echo`` tool (the registry pipeline the
  agent loop uses, in process);
- **mcp (dsh)**: ``ctx.tools.execute`` of ``mcp__bench__echo``, the same pipeline plus dsh's MCP
  client: the call goes to a real stdio server written with the SDK's ``MCPServer`` (running
  under dsh's process-group guard) and back, and the result is mapped to dsh content blocks;
- **mcp (SDK only)**: ``ClientSession.call_tool`` on a plain SDK stdio connection to the same
  server (no dsh at all), to show what dsh's layer adds to the SDK's own round trip.

Reported: median and p95 per call in microseconds, the MCP ÷ native ratio, dsh's overhead over
the bare SDK, and the time to start the server and list its tools (once, not a median).
``--calls N`` (default 300) and ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._util import machine, median, percentile

SERVER_CODE = '''
from mcp.server.mcpserver import MCPServer
app = MCPServer("bench")

@app.tool()
def echo(text: str) -> str:
    """Echo the text in upper case."""
    return "ECHO: " + text.upper()

app.run("stdio")
'''


async def _timed(call: Any, n: int, warmup: int = 20) -> list[float]:
    for _ in range(warmup):
        await call()
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        await call()
        samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


async def _measure(server: Path, n: int) -> dict[str, Any]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from dsh.runtime import Context
    from dsh.runtime.loader import PluginEntry, load_plugins

    ctx = Context()
    started = time.perf_counter()
    await load_plugins(
        ctx,
        [
            PluginEntry("tools", "dsh.tools.registry"),
            PluginEntry("echo", "echo-tool"),
            PluginEntry("mcp", "mcp", {"serverName": "bench", "command": sys.executable, "args": [str(server)]}),
        ],
    )
    startup = time.perf_counter() - started
    params = StdioServerParameters(command=sys.executable, args=[str(server)])
    try:
        assert "mcp__bench__echo" in ctx.tools, "the bench server did not start"
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()

            async def native() -> None:
                result = await ctx.tools.execute(call_id="c", name="echo", arguments={"text": "hi"})
                assert result.content == [{"type": "text", "text": "ECHO: HI"}]

            async def mcp() -> None:
                result = await ctx.tools.execute(call_id="c", name="mcp__bench__echo", arguments={"text": "hi"})
                assert result.content == [{"type": "text", "text": "ECHO: HI"}], result

            async def sdk() -> None:
                await session.call_tool("echo", {"text": "hi"})

            # Interleaved rounds, so the machine's noise hits every side alike.
            samples: dict[str, list[float]] = {"native": [], "mcp": [], "sdk": []}
            rounds = 10
            for _ in range(rounds):
                for key, call in (("native", native), ("mcp", mcp), ("sdk", sdk)):
                    samples[key] += await _timed(call, max(n // rounds, 1), warmup=5)
    finally:
        await ctx.dispose()
    return {"samples": samples, "startup": startup}


def run(calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="dsh-bench-mcp-") as tmp:
        os.environ.setdefault("DSH_HOME", tmp)
        server = Path(tmp) / "echo_server.py"
        server.write_text(SERVER_CODE)
        measured = asyncio.run(_measure(server, calls))
    samples, startup = measured["samples"], measured["startup"]
    native_s, mcp_s, sdk_s = samples["native"], samples["mcp"], samples["sdk"]
    figures = {
        "native_median_us": median(native_s),
        "native_p95_us": percentile(native_s, 0.95),
        "mcp_median_us": median(mcp_s),
        "mcp_p95_us": percentile(mcp_s, 0.95),
        "sdk_median_us": median(sdk_s),
        "sdk_p95_us": percentile(sdk_s, 0.95),
        "startup_s": startup,
    }
    figures["mcp_over_native"] = figures["mcp_median_us"] / figures["native_median_us"]
    figures["dsh_over_sdk_us"] = figures["mcp_median_us"] - figures["sdk_median_us"]
    figures["calls"] = len(mcp_s)
    figures["machine"] = machine()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_roundtrip")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = run(args.calls)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"machine: {figures['machine']}")
    print(f"calls per side: {figures['calls']}")
    print(f"{'':24}{'median µs':>12}{'p95 µs':>12}")
    for label, key in (("native echo", "native"), ("mcp stdio (dsh)", "mcp"), ("mcp stdio (SDK only)", "sdk")):
        print(f"{label:24}{figures[key + '_median_us']:>12.1f}{figures[key + '_p95_us']:>12.1f}")
    print(f"mcp ÷ native (median): {figures['mcp_over_native']:.0f}×")
    print(f"dsh layer over the SDK's round trip (median): {figures['dsh_over_sdk_us']:.1f} µs")
    print(f"server start + initialize + list tools: {figures['startup_s']:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
