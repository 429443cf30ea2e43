"""The ``mcp`` plugin in process, against real servers: approval flags, unique server names,
errors while a server is down, HTTP reconnect, and a spent reconnect budget."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.plugins.mcp import supervision
from dsh.plugins.mcp.config import Config, ServerSpec, spec_from_config
from dsh.plugins.mcp.plugin import Server, connect, servers
from dsh.runtime import Context
from dsh.runtime.loader import LoadError, PluginEntry, load_plugins
from dsh.tools.registry import TOOLS
from tests.mcp.conftest import SERVER, HttpServer, alive, pids
from tests.support.wait import wait_until

pytestmark = pytest.mark.slow


def stdio(name: str, tmp: Path, **extra: Any) -> PluginEntry:
    config = {
        "serverName": name,
        "command": sys.executable,
        "args": [str(SERVER)],
        "env": {"MCP_TAG": name, "MCP_PIDFILE": str(tmp / f"{name}.pids")},
        "startupTimeoutMs": 180_000,
        **extra,
    }
    return PluginEntry(f"mcp-{name}", "mcp", config)


@pytest.fixture
async def mounted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Callable[..., Any]]:
    monkeypatch.setenv("DSH_HOME", str(tmp_path / "home"))
    contexts: list[Context] = []

    async def mount(*entries: PluginEntry) -> Context:
        ctx = Context()
        contexts.append(ctx)
        await load_plugins(ctx, [PluginEntry("tools", "dsh.tools.registry"), *entries])
        return ctx

    yield mount
    for ctx in contexts:
        await ctx.dispose()


async def until(predicate: Callable[[], bool], timeout: float = 180) -> None:
    """:func:`wait_until` with room for a loaded machine to start a server."""
    await wait_until(predicate, timeout)


def server(ctx: Context, name: str) -> Server:
    return next(s for s in servers(ctx.tools) if s.spec.name == name)


async def call(ctx: Context, name: str, **arguments: Any) -> tuple[bool, str]:
    result = await ctx.tools.execute(call_id="c", name=name, arguments=arguments)
    return result.is_error, "".join(b["text"] for b in result.content)


async def test_approval_flags_and_unique_server_names(mounted: Any, tmp_path: Path) -> None:
    ctx = await mounted(stdio("ask", tmp_path), stdio("trusted", tmp_path, approval="trusted"))
    assert ctx.tools.get("mcp__ask__search").needs_approval is True
    assert ctx.tools.get("mcp__trusted__search").needs_approval is False
    with pytest.raises(LoadError, match='serverName "ask" is already used'):
        await load_plugins(ctx, [stdio("ask", tmp_path)])
    registry = ctx.tools
    await ctx.dispose()
    assert servers(registry) == []
    assert not [n for n in registry.names() if n.startswith("mcp__")]


@pytest.mark.sigkill
async def test_stdio_server_killed_errors_while_down_then_recovers(mounted: Any, tmp_path: Path) -> None:
    ctx = await mounted(stdio("alpha", tmp_path, approval="trusted"))
    (pid, _guard), = pids(tmp_path / "alpha.pids")
    conn = server(ctx, "alpha").connection
    os.kill(pid, signal.SIGKILL)
    await until(lambda: conn.status == "reconnecting")
    failed, text = await call(ctx, "mcp__alpha__search", q="x")
    assert failed
    assert text.startswith('Error: MCP server "alpha" is unavailable (')
    assert "reconnecting (attempt 1 of 10). Try again shortly." in text
    await until(lambda: conn.status == "connected")
    assert await call(ctx, "mcp__alpha__search", q="x") == (False, "alpha found x")
    assert len(pids(tmp_path / "alpha.pids")) == 2


async def test_http_server_restarted_is_reconnected(mounted: Any, tmp_path: Path) -> None:
    first = HttpServer("web", tmp_path)
    try:
        ctx = await mounted(PluginEntry("web", "mcp", {"serverName": "web", "url": first.url, "startupTimeoutMs": 180_000, "approval": "trusted"}))
        assert await call(ctx, "mcp__web__search", q="a") == (False, "web found a")
        first.stop()
        failed, text = await call(ctx, "mcp__web__search", q="b")
        assert failed and 'MCP server "web"' in text and "reconnecting" in text, text
        restarted = _restart_on(first.port, tmp_path)
        try:
            conn = server(ctx, "web").connection
            assert conn.status != "connected"
            await until(lambda: conn.status == "connected", 90)
            res = await call(ctx, "mcp__web__search", q="c")
            assert res == (False, "web found c"), (res, conn.status, conn.reason)
            # Restarted between two calls: the server answers the old session with "Session
            # not found", so it never ran the call; dsh reconnects and runs it once.
            restarted.stop()
            restarted = _restart_on(first.port, tmp_path)
            assert await call(ctx, "mcp__web__search", q="d") == (False, "web found d")
            assert conn.status == "connected"
        finally:
            restarted.stop()
    finally:
        first.stop()


def _restart_on(port: int, tmp: Path) -> HttpServer:
    """A new HTTP server process on the port of one that was stopped."""
    import tests.mcp.conftest as support

    original = support.free_port
    support.free_port = lambda: port
    try:
        return HttpServer("web", tmp)
    finally:
        support.free_port = original


async def test_spent_budget_is_a_clear_final_error(
    mounted: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervision, "BACKOFF_START_S", 0.01)
    monkeypatch.setattr(supervision, "BACKOFF_MAX_S", 0.02)
    monkeypatch.setattr(supervision, "MAX_FAILURES", 2)
    web = HttpServer("web", tmp_path)
    try:
        ctx = await mounted(PluginEntry("web", "mcp", {"serverName": "web", "url": web.url, "startupTimeoutMs": 180_000, "approval": "trusted"}))
        web.stop()
        await call(ctx, "mcp__web__search", q="b")  # notices the server is gone
        conn = server(ctx, "web").connection
        await until(lambda: conn.status == "failed", 60)
        failed, text = await call(ctx, "mcp__web__search", q="c")
        assert failed
        assert text.startswith('Error: MCP server "web" is unavailable: gave up after 2 consecutive failures: ')
        assert text.endswith("Restart dsh to reconnect.")
    finally:
        web.stop()


def agent_spec(tag: str, tmp: Path, name: str = "docs") -> ServerSpec:
    config = Config(
        server_name=name,
        command=sys.executable,
        args=[str(SERVER)],
        env={"MCP_TAG": tag, "MCP_PIDFILE": str(tmp / f"{tag}.pids")},
        approval="trusted",
        startup_timeout_ms=180_000,
    )
    return spec_from_config(config, source="test")


async def test_servers_connected_for_one_agent_are_that_agents_alone(mounted: Any, tmp_path: Path) -> None:
    ctx = await mounted(stdio("shared", tmp_path, approval="trusted"))
    registry = ctx.require(TOOLS)
    # The same server name for two agents; a name every agent already sees is skipped.
    mount_a = await connect(registry, [agent_spec("alpha", tmp_path), agent_spec("x", tmp_path, "shared")], agent_id="a", skip_taken=True)
    mount_b = await connect(registry, [agent_spec("beta", tmp_path)], agent_id="b")
    try:
        assert [s.spec.name for s in servers(registry)] == ["shared"]
        assert [s.spec.name for s in servers(registry, agent_id="a")] == ["docs"]
        assert not (tmp_path / "x.pids").exists()
        assert "mcp__docs__search" not in registry.names()
        assert {"mcp__docs__search", "mcp__shared__search"} <= set(registry.names(agent_id="a"))

        async def search(agent_id: str | None) -> str:
            result = await registry.execute(call_id="c", name="mcp__docs__search", arguments={"q": "x"}, agent_id=agent_id)
            return "".join(b["text"] for b in result.content)

        assert (await search("a"), await search("b")) == ("alpha found x", "beta found x")
        assert await search(None) == 'Error: unknown tool "mcp__docs__search"'
        with pytest.raises(ValueError, match='serverName "docs" is already used'):
            await connect(registry, [agent_spec("again", tmp_path)], agent_id="a")

        (alpha_pid, _guard), = pids(tmp_path / "alpha.pids")
        await mount_a.close()
        await until(lambda: not alive(alpha_pid), 60)
        assert servers(registry, agent_id="a") == [] and registry.names(agent_id="a") == registry.names()
        assert await search("b") == "beta found x"
    finally:
        await mount_a.close()
        await mount_b.close()
