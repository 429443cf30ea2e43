"""A real MCP server for the tests, written with the SDK's own server API (``MCPServer``).

``python mcp_test_server.py`` serves stdio; ``--http PORT`` serves streamable HTTP on
127.0.0.1. Environment: ``MCP_TAG`` names the server in replies, ``MCP_PIDFILE`` gets one line
``<pid> <parent pid>`` per start, ``MCP_MARKER`` records what ``hang`` saw (started/cancelled),
``MCP_FAIL_START=1`` exits at once with a message on stderr. ``MCP_SPAWN=FILE`` first starts two
processes that leave the server's process group, a ``setsid`` sleeper and a double-forked
daemon, and writes their pids to FILE (one line ``<sleeper> <daemon>``); ``MCP_BIG=N``
makes the tool ``big`` return N bytes of text ending in ``THE-END``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent, ResourceLink, TextContent, ToolAnnotations

TAG = os.environ.get("MCP_TAG", "server")
app = MCPServer(TAG)


def _mark(text: str) -> None:
    marker = os.environ.get("MCP_MARKER")
    if marker:
        with open(marker, "a", encoding="utf-8") as f:
            f.write(text + "\n")


@app.tool()
def search(q: str) -> str:
    """Search for q."""
    return f"{TAG} found {q}"


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def peek(q: str) -> str:
    """Look at q without changing anything (annotated readOnlyHint)."""
    return f"{TAG} peeked at {q}"


@app.tool(name="do.thing")
def do_thing() -> str:
    """A tool whose raw name is not a valid function name."""
    return f"{TAG} did the thing"


@app.tool()
def check_token(ctx: Context) -> str:
    """A fingerprint of the secret this server received (env TOKEN, or the Authorization header)."""
    token = os.environ.get("TOKEN")
    if token is None:
        headers = ctx.headers or {}
        token = headers.get("authorization", "").removeprefix("Bearer ")
    return "fingerprint " + hashlib.sha256(token.encode()).hexdigest()[:12]


@app.tool()
def fail() -> str:
    """Always fails (isError)."""
    raise ToolError("the input was rejected")


@app.tool()
def media() -> list[TextContent | ImageContent | ResourceLink]:
    """Mixed content blocks."""
    return [
        TextContent(type="text", text="before"),
        ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png"),
        ResourceLink(type="resource_link", uri="file:///tmp/report.txt", name="report"),
        TextContent(type="text", text="after"),
    ]


@app.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool "extra" and announces the new list."""

    def extra(x: str) -> str:
        return f"extra {x}"

    app.add_tool(extra, name="extra", description="Added at run time.")
    await ctx.session.send_tool_list_changed()
    return "grown"


@app.tool()
async def hang(seconds: float = 3600) -> str:
    """Sleeps (for timeout and cancellation tests)."""
    _mark("started")
    try:
        await asyncio.sleep(seconds)  # scripted: a tool that takes ``seconds``
    except asyncio.CancelledError:
        _mark("cancelled")
        raise
    return "woke up"


@app.tool()
def big() -> str:
    """A result of MCP_BIG bytes."""
    size = int(os.environ.get("MCP_BIG", "0"))
    return "x" * max(size - 7, 0) + "THE-END"


def _spawn_escapees(pidfile: str) -> None:
    """A setsid sleeper and a double-forked daemon: both leave the server's process group."""
    sleeper = subprocess.Popen(
        ["sleep", "600"], start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    read, write = os.pipe()
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.write(write, f"{os.getpid()}\n".encode())
            os.execvp("sleep", ["sleep", "601"])
        os._exit(0)
    os.waitpid(first, 0)
    os.close(write)
    daemon = int(os.read(read, 64).decode().strip())
    with open(pidfile, "a", encoding="utf-8") as f:
        f.write(f"{sleeper.pid} {daemon}\n")


def main() -> None:
    if os.environ.get("MCP_FAIL_START") == "1":
        print("mcp test server: refusing to start", file=sys.stderr)
        sys.exit(1)
    if os.environ.get("MCP_SPAWN"):
        _spawn_escapees(os.environ["MCP_SPAWN"])
    pidfile = os.environ.get("MCP_PIDFILE")
    if pidfile:
        with open(pidfile, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {os.getppid()}\n")
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run("stdio")


if __name__ == "__main__":
    main()
