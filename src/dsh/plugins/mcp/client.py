"""One supervised connection to an MCP server, on the official ``mcp`` SDK.

This module owns a server's connection lifecycle: starting it (stdio or streamable HTTP),
listing its tools, re-listing on ``notifications/tools/list_changed``, calling a tool with a
timeout and cancellation, and reconnecting after a crash with backoff (500 ms doubling to 30 s,
at most 10 consecutive failures; the budget resets once a connection stayed up for a healthy
period). While the server is down every call fails at once with a model-visible reason.

The SDK's context managers live in one supervisor task per server (anyio requires them to be
entered and left in the same task); calls from tool executions only use the session's streams.

A stdio server runs under :mod:`._guard` in a new process group with a scrubbed environment
(the SDK's safe variables plus the configured ``env``), so it is stopped on dispose and cannot
outlive dsh even when dsh is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Literal, TextIO

import anyio
import httpx2
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream

# The SDK's own alias for a transport's (read, write) pair.
from mcp.client._transport import ReadStream, TransportStreams
from mcp.client.session import ClientSession, IncomingMessage
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from dsh.plugins.mcp import supervision
from dsh.plugins.mcp.config import ServerSpec, dsh_home
from dsh.plugins.mcp.supervision import Backoff, describe, leaf, seconds
from dsh.runtime.abort import AbortSignal
from dsh.tools.types import ToolError

__all__ = ["Connection", "Status"]

log = logging.getLogger("dsh.mcp")

CLOSE_TIMEOUT_S = 10.0
RESYNC_WAIT_S = 5.0
_LIST_CHANGED = "notifications/tools/list_changed"
GUARD = Path(__file__).with_name("_guard.py")

Status = Literal["starting", "connected", "reconnecting", "failed", "closed"]


class Connection:
    """A supervised connection to one server; ``on_tools`` receives every tool listing."""

    def __init__(self, spec: ServerSpec, on_tools: Callable[[list[types.Tool]], None]) -> None:
        self.spec = spec
        self.status: Status = "starting"
        self.reason: str | None = None
        self.tools: list[types.Tool] = []
        self.pid: int | None = None
        self._on_tools = on_tools
        self._session: ClientSession | None = None
        self._lost: asyncio.Event | None = None
        self._lost_reason: str | None = None
        self._wake = asyncio.Event()
        self._started = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._resync = asyncio.Event()
        self._syncing: asyncio.Task[None] | None = None
        self._was_up = False
        self._backoff = Backoff()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> bool:
        """Connect and list tools; ``True`` when connected, ``False`` when the start failed."""
        self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.spec.name}")
        # Whatever ends the supervisor (even a bug) must not leave the load waiting forever.
        self._task.add_done_callback(self._supervisor_done)
        await self._started.wait()
        return self.status == "connected"

    def _supervisor_done(self, task: asyncio.Task[None]) -> None:
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            self.status, self.reason = "failed", f"internal error: {describe(exc)}"
            log.error('mcp: server "%s": %s', self.spec.name, self.reason)
        self._started.set()

    async def close(self) -> None:
        """Stop the server (stdio: close stdin, then terminate its process group)."""
        self._closing = True
        self._wake.set()
        if self._lost is not None:
            self._lost.set()
        task = self._task
        if task is None or task.done():
            self.status = "closed"
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT_S)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self.status = "closed"

    async def _supervise(self) -> None:
        ever = False
        while not self._closing:
            reason = "connection closed"
            try:
                await self._connect_once()
                reason = self._lost_reason or reason
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                reason = describe(exc)
                if self.spec.transport == "stdio" and isinstance(leaf(exc), MCPError):
                    reason += f" (the server's stderr is in {_errlog_path(self.spec.name)})"
            finally:
                self._session = None
                self._lost = None
                self.pid = None
            ever = ever or self._was_up
            if self._closing:
                break
            if not ever:
                self.status, self.reason = "failed", reason
                self._started.set()
                return
            delay = self._backoff.lost()
            if delay is None:
                self.status = "failed"
                self.reason = f"gave up after {supervision.MAX_FAILURES} consecutive failures: {reason}"
                log.warning('mcp: server "%s" failed: %s', self.spec.name, self.reason)
                return
            if self._was_up:
                log.warning('mcp: server "%s" disconnected (%s); reconnecting', self.spec.name, reason)
            self.status, self.reason = "reconnecting", reason
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
        self.status = "closed"
        self._started.set()

    @contextlib.asynccontextmanager
    async def _transport(
        self,
    ) -> AsyncIterator[TransportStreams]:
        spec = self.spec
        if spec.transport == "stdio":
            assert spec.command is not None
            path = spec.env.get("PATH", os.environ.get("PATH"))
            if shutil.which(spec.command, path=path) is None and not (
                spec.cwd and shutil.which(os.path.join(spec.cwd, spec.command))
            ):
                raise FileNotFoundError(2, "not found", spec.command)
            params = StdioServerParameters(
                command=sys.executable,
                args=["-I", "-S", str(GUARD), str(os.getpid()), spec.command, *spec.args],
                env=dict(spec.env),
                cwd=spec.cwd,
            )
            with _errlog(spec.name) as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write):
                    yield read, write
        else:
            assert spec.url is not None
            timeout = httpx2.Timeout(30.0, read=300.0)
            async with (
                httpx2.AsyncClient(headers=dict(spec.headers), timeout=timeout) as http,
                streamable_http_client(spec.url, http_client=http) as (read, write),
            ):
                yield read, write

    async def _connect_once(self) -> None:
        lost = self._lost = asyncio.Event()
        self._lost_reason = None
        self._was_up = False
        async with self._transport() as (read, write):
            inner_send, inner_read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            pump = asyncio.create_task(self._pump(read, inner_send, lost))
            try:
                async with ClientSession(inner_read, write, message_handler=self._on_message) as session:
                    try:
                        with anyio.fail_after(self.spec.startup_timeout_ms / 1000):
                            await session.initialize()
                            tools = await _list_tools(session)
                    except TimeoutError:
                        limit = seconds(self.spec.startup_timeout_ms)
                        raise TimeoutError(f"no answer to initialize and tools/list within {limit}") from None
                    if self._closing:
                        return
                    self._session = session
                    self._accept_tools(tools)
                    if self.status == "reconnecting":
                        log.warning('mcp: server "%s" reconnected', self.spec.name)
                    self.status, self.reason = "connected", None
                    self._was_up = True
                    self._backoff.connected()
                    self._started.set()
                    await lost.wait()
            finally:
                self._session = None
                for task in (pump, self._syncing):
                    if task is not None:
                        task.cancel()
                        with contextlib.suppress(BaseException):
                            await task
                self._syncing = None

    async def _pump(
        self,
        source: ReadStream[SessionMessage | Exception],
        sink: MemoryObjectSendStream[SessionMessage | Exception],
        lost: asyncio.Event,
    ) -> None:
        # Forwards the transport to the session, so that the end of the server's output (a
        # crashed process) is noticed even while no call is waiting.
        try:
            async with sink:
                async for item in source:
                    # Seen here, in arrival order, so a call whose own notification announced
                    # new tools returns only after the re-listing (the session would deliver
                    # the notification in a task of its own, possibly after the response).
                    if isinstance(item, SessionMessage) and _is_list_changed(item):
                        self._request_resync()
                    await sink.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass
        finally:
            self._mark_lost("the server closed the connection", lost)

    def _mark_lost(self, reason: str, lost: asyncio.Event | None = None) -> None:
        event = lost or self._lost
        if event is not None and not event.is_set():
            self._lost_reason = self._lost_reason or reason
            if self.status == "connected":
                # Calls fail fast from now on instead of reaching a session being torn down.
                self.status, self.reason = "reconnecting", self._lost_reason
            event.set()

    def _request_resync(self) -> None:
        self._resync.set()
        session = self._session
        if session is not None and (self._syncing is None or self._syncing.done()):
            self._syncing = asyncio.create_task(self._resync_tools(session))

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            log.debug("mcp %s: transport error: %s", self.spec.name, describe(message))

    async def _resync_tools(self, session: ClientSession) -> None:
        # Notifications arriving while a listing runs ask for one more listing, not one each.
        while self._resync.is_set():
            self._resync.clear()
            try:
                tools = await _list_tools(session)
            except Exception as exc:
                # The previous generation stays registered.
                log.warning('mcp: server "%s": re-listing tools failed: %s', self.spec.name, describe(exc))
                return
            if session is self._session:
                self._accept_tools(tools)

    async def _synced(self) -> None:
        """Wait (briefly) for a re-listing a call's own notification started, so the next
        request already shows the tools the call added or removed."""
        task = self._syncing
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=RESYNC_WAIT_S)

    def _accept_tools(self, tools: list[types.Tool]) -> None:
        self.tools = tools
        self._on_tools(tools)

    # -- calls ------------------------------------------------------------------------------------

    def unavailable(self) -> str:
        """The model-visible reason this server cannot take a call right now."""
        name, reason = self.spec.name, self.reason or "not connected"
        if self.status == "reconnecting":
            return (
                f'MCP server "{name}" is unavailable ({reason}); reconnecting '
                f"(attempt {max(self._backoff.failures, 1)} of {supervision.MAX_FAILURES}). Try again shortly."
            )
        if self.status == "failed":
            return f'MCP server "{name}" is unavailable: {reason}. Restart dsh to reconnect.'
        return f'MCP server "{name}" is not connected ({self.status}).'

    async def call(
        self, raw_name: str, arguments: dict[str, object], signal: AbortSignal, *, retry: bool = True
    ) -> types.CallToolResult:
        """Call tool ``raw_name``; raises :class:`ToolError` with a model-visible reason."""
        retry_on_new_session = False
        session = self._session
        if session is None or self.status != "connected":
            raise ToolError(self.unavailable())
        timeout_s = self.spec.call_timeout_ms / 1000
        task = asyncio.ensure_future(
            session.call_tool(raw_name, arguments, read_timeout_seconds=timeout_s)
        )
        remove = signal.add_listener(task.cancel)
        try:
            result = await task
            await self._synced()
            return result
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if signal.aborted and not (current is not None and current.cancelling()):
                raise ToolError(f"MCP call cancelled: {signal.reason}") from None
            raise
        except MCPError as exc:
            if exc.code == types.REQUEST_TIMEOUT:
                raise ToolError(
                    f'MCP tool "{raw_name}" on server "{self.spec.name}" timed out after '
                    f"{seconds(self.spec.call_timeout_ms)}"
                ) from None
            if exc.code == types.CONNECTION_CLOSED:
                self._mark_lost("the connection closed during a call")
                raise ToolError(
                    f'MCP server "{self.spec.name}" disconnected during the call; reconnecting. '
                    "Try again shortly."
                ) from None
            if not (self.spec.transport == "streamable-http" and _session_gone(exc)):
                raise ToolError(f'MCP server "{self.spec.name}": {describe(exc)}') from None
            # The server restarted and forgot our session, so it did not run this call: one
            # retry on a new session is safe.
            self._mark_lost("the server ended the session")
            retry_on_new_session = retry
            if not retry:
                raise ToolError(
                    f'MCP server "{self.spec.name}" ended the session; reconnecting. Try again shortly.'
                ) from None
        except Exception as exc:
            # A transport failure (an HTTP server that went away): reconnect.
            reason = describe(exc)
            self._mark_lost(reason)
            raise ToolError(
                f'MCP server "{self.spec.name}" is unreachable ({reason}); reconnecting. '
                "Try again shortly."
            ) from None
        finally:
            remove()
        assert retry_on_new_session
        await self._reconnected(signal)
        return await self.call(raw_name, arguments, signal, retry=False)

    async def _reconnected(self, signal: AbortSignal) -> None:
        """Wait until a reconnect started by a call succeeds, fails, or the call is cancelled."""
        limit = self.spec.startup_timeout_ms / 1000 + supervision.BACKOFF_START_S + 1
        deadline = asyncio.get_running_loop().time() + limit
        await asyncio.sleep(0)
        while self.status == "reconnecting" and not signal.aborted:
            if asyncio.get_running_loop().time() > deadline:
                return
            await asyncio.sleep(0.02)


def _session_gone(exc: MCPError) -> bool:
    text = exc.message.lower()
    return "session" in text and ("not found" in text or "terminated" in text)


def _is_list_changed(item: SessionMessage) -> bool:
    message = item.message
    return isinstance(message, types.JSONRPCNotification) and message.method == _LIST_CHANGED


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def _errlog_path(server: str) -> Path:
    return dsh_home() / "logs" / f"mcp-{server}.log"


@contextlib.contextmanager
def _errlog(server: str) -> Iterator[TextIO]:
    """The server's stderr: ``<dsh home>/logs/mcp-<server>.log``, else discarded."""
    path = _errlog_path(server)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115
    except OSError:
        handle = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    try:
        yield handle
    finally:
        handle.close()
