"""``dsh acp``: an Agent Client Protocol (v1) agent on stdio, one dsh agent per ACP session.

Owns the ACP method handlers (``initialize``, ``session/new``, ``session/load``,
``session/resume``, ``session/list``, ``session/prompt``, ``session/cancel``, ``session/close``),
the ordered stream of ``session/update`` notifications fed by the ``session/event`` bus, and the
lifetime of each session's client MCP servers (the process around it, stdio and signals, is
:mod:`.serve`) (:mod:`.mcp_servers`: connected for that session's
agent alone, stopped when it closes). The approval asker is :mod:`.permissions`. Everything else
is the ordinary composition of ``dsh chat`` (model, tools, time-context, store) on one
:class:`Context`: each ACP session is an agent whose id is its session id, on a durable session
whose ``cwd`` is the client's ``cwd`` (the workspace of the workspace tools).

Errors a client can cause get a JSON-RPC error with a message saying what was wrong, and the
process keeps serving: an unknown session, a second prompt while one runs, an unsupported
content block, a session held by another process.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from acp import PROTOCOL_VERSION, schema
from acp.agent.connection import AgentSideConnection
from acp.exceptions import RequestError

from dsh import _zones
from dsh.agent.agent import Agent
from dsh.agent.loop import AGENT_LOOP
from dsh.apps import workspace_choice
from dsh.apps.acp.mapping import (
    PromptBlock,
    Update,
    invalid_params,
    prompt_content,
    stop_reason,
    updates_for,
)
from dsh.apps.acp.mcp_servers import ClientServers, McpServer, checked, connect_for
from dsh.apps.acp.permissions import ClientAsker
from dsh.apps.acp.replay import replay
from dsh.apps.acp.wire import StdioTransport, WireMessage
from dsh.persistence.base import SESSION_STORE, StoreError
from dsh.plugins.subagent.lineage import is_child_header
from dsh.plugins.subagent.progress import child_activity
from dsh.runtime import Context
from dsh.session import Event, Session
from dsh.tools.registry import TOOLS
from dsh.tools.workspace.approval import APPROVAL

__all__ = ["AcpOptions", "DshAcpAgent"]

log = logging.getLogger("dsh.acp")

LIST_PAGE = 100
CLIENT_ZONE_ERROR = "clientTimeZone must be UTC or a valid IANA Area/Location name"
"""The reference host's refusal of a bad prompt zone (its data: ``{"value": <as sent>}``)."""


@dataclass
class AcpOptions:
    model: str | None = None
    """The model of new sessions; loaded sessions keep their recorded one unless this is set."""
    default_model: str = "mock-echo"
    permission_timeout: float = 600.0
    """Seconds to wait for the client's answer to a permission request before refusing."""
    time_zone: str | None = None
    """The zone of a prompt whose ``_meta`` names none (the app's ``timeZone``)."""


@dataclass
class _AcpSession:
    agent: Agent
    cwd: str | None
    mcp: ClientServers
    tool_names: dict[str, str] = field(default_factory=dict)
    prompting: bool = False
    first_turn: int = 0
    reason: Mapping[str, object] | None = None
    last_finish: str | None = None


def _cwd(session: Session) -> str | None:
    cwd = session.header.get("cwd")
    return cwd if isinstance(cwd, str) else None


def _unknown(session_id: str) -> RequestError:
    return invalid_params(f'unknown session "{session_id}": create it with session/new or load it with session/load')


class DshAcpAgent:
    """The ACP agent (the ``acp.Agent`` protocol) over one dsh :class:`Context`."""

    def __init__(self, ctx: Context, options: AcpOptions, transport: StdioTransport | None = None) -> None:
        self.ctx = ctx
        self.transport = transport
        self.options = options
        self.client: AgentSideConnection | None = None
        self.sessions: dict[str, _AcpSession] = {}
        # One ordered outbox: updates leave in the order their events were appended.
        self._outbox: asyncio.Queue[tuple[str, Update] | asyncio.Future[None]] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None
        self._closing = False
        ctx.defer(ctx.on("session/event", self._on_event))

    # -- connection --------------------------------------------------------------------------

    def on_connect(self, conn: AgentSideConnection) -> None:
        self.client = conn
        approval = self.ctx.get(APPROVAL)
        if approval is not None:
            asker = ClientAsker(conn, self._session_of, timeout=self.options.permission_timeout)
            self.ctx.defer(approval.set_asker(asker))
        self._sender = asyncio.get_running_loop().create_task(self._send_loop())

    def _session_of(self, agent: object) -> tuple[str, str | None] | None:
        if not isinstance(agent, Agent):
            return None
        state = self.sessions.get(agent.session.id)
        return (state.agent.session.id, state.cwd) if state is not None else None

    async def _send_loop(self) -> None:
        while True:
            item = await self._outbox.get()
            if isinstance(item, asyncio.Future):
                if not item.done():
                    item.set_result(None)
                continue
            session_id, update = item
            if self.client is None:
                continue
            try:
                await self.client.session_update(session_id, update)
            except Exception as exc:
                log.debug("acp: session/update not delivered: %s", exc)

    async def _drained(self) -> None:
        """Wait until everything queued so far has been sent."""
        marker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._outbox.put_nowait(marker)
        await marker

    def _on_event(self, session: Session, event: Event) -> None:
        state = self.sessions.get(session.id)
        if state is None:
            self._child_event(session, event)
            return
        data: Mapping[str, object] = event.data
        if event.type == "assistant/chunk":
            chunk = data.get("chunk")
            if isinstance(chunk, dict) and chunk.get("type") == "finish":
                reason = chunk.get("reason")
                state.last_finish = str(reason.get("kind")) if isinstance(reason, dict) else None
        elif event.type == "turn/end" and state.prompting:
            turn = data.get("turn")
            if isinstance(turn, int) and turn >= state.first_turn:
                reason = data.get("reason")
                state.reason = reason if isinstance(reason, dict) else {"kind": "completed"}
        for update in updates_for(event.type, data, cwd=state.cwd, tool_names=state.tool_names, replay=False):
            self._outbox.put_nowait((session.id, update))

    def _child_event(self, session: Session, event: Event) -> None:
        """A subagent's activity, as updates of the parent's ``subagent`` call."""
        activity = child_activity(self.ctx, session.id, event)
        if activity is None or activity.root_session not in self.sessions:
            return
        update = schema.ToolCallProgress(
            session_update="tool_call_update",
            tool_call_id=activity.call_id,
            status="in_progress",
            content=[schema.ContentToolCallContent(type="content", content=schema.TextContentBlock(type="text", text=activity.text))],
        )
        self._outbox.put_nowait((activity.root_session, update))

    # -- methods -----------------------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: schema.ClientCapabilities | None = None,
        client_info: schema.Implementation | None = None,
        **kwargs: object,
    ) -> schema.InitializeResponse:
        try:
            version = importlib.metadata.version("dsh")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        return schema.InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=schema.AgentCapabilities(
                load_session=True,
                prompt_capabilities=schema.PromptCapabilities(image=False, audio=False, embedded_context=True),
                mcp_capabilities=schema.McpCapabilities(http=True, sse=False),
                session_capabilities=schema.SessionCapabilities(
                    list=schema.SessionListCapabilities(),
                    resume=schema.SessionResumeCapabilities(),
                    close=schema.SessionCloseCapabilities(),
                ),
            ),
            agent_info=schema.Implementation(name="dsh", title="dsh", version=version),
            auth_methods=[],
        )

    async def authenticate(self, method_id: str, **kwargs: object) -> schema.AuthenticateResponse | None:
        return schema.AuthenticateResponse()

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: Sequence[McpServer] | None = None,
        **kwargs: object,
    ) -> schema.NewSessionResponse:
        _check_cwd(cwd)
        servers = checked(mcp_servers)  # refused before anything exists
        session_id = f"main-session-{uuid.uuid4()}"
        model = self.options.model or self.options.default_model
        agent = self.ctx.require(AGENT_LOOP).create(session_id, model=model, cwd=cwd, session_id=session_id)
        state = self.sessions[session_id] = _AcpSession(agent, cwd, ClientServers([]))
        await self._connect_mcp(state, servers)
        log.info("acp: new session %s in %s", session_id, cwd)
        return schema.NewSessionResponse(session_id=session_id)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: Sequence[McpServer] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: object,
    ) -> schema.LoadSessionResponse:
        state = await self._open(cwd, session_id, mcp_servers)
        client = self.client
        if client is not None:
            # Straight to the client, in order, before the response; nothing else runs on an
            # idle session meanwhile.
            await self._drained()

            async def send(update: Update) -> None:
                await client.session_update(session_id, update)

            transport = self.transport
            send_raw = None
            if transport is not None:

                def send_raw(update: WireMessage) -> None:
                    params = {"sessionId": session_id, "update": update}
                    transport.write({"jsonrpc": "2.0", "method": "session/update", "params": params})

            names: dict[str, str] = {}
            events = list(state.agent.session.events)
            if transport is None:
                await replay(events, send, cwd=state.cwd, tool_names=names)
            else:
                with transport.batched():
                    await replay(events, send, cwd=state.cwd, tool_names=names, send_raw=send_raw)
            state.tool_names.update(names)
        return schema.LoadSessionResponse()

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: Sequence[McpServer] | None = None,
        **kwargs: object,
    ) -> schema.ResumeSessionResponse:
        await self._open(cwd, session_id, mcp_servers)
        return schema.ResumeSessionResponse()

    async def _open(self, cwd: str, session_id: str, mcp_servers: Sequence[McpServer] | None) -> _AcpSession:
        _check_cwd(cwd)
        servers = checked(mcp_servers)
        state = self.sessions.get(session_id)
        if state is not None:
            if state.prompting:
                raise RequestError(-32600, f'session "{session_id}" is running a prompt; cancel it first')
            if servers != state.mcp.requested:
                # The client's new list replaces the old one; stopping first frees the names.
                await state.mcp.close()
                await self._connect_mcp(state, servers)
            return state
        try:
            agent = await self.ctx.require(AGENT_LOOP).resume(session_id, session_id, model=self.options.model)
        except StoreError as exc:
            raise invalid_params(f'cannot load session "{session_id}": {exc}') from None
        except ValueError as exc:
            raise invalid_params(f'cannot load session "{session_id}": {exc}') from None
        if agent.options.model is None:
            agent.options.model = self.options.default_model
        stored_cwd = _cwd(agent.session)
        try:
            # The client's cwd is the chosen workspace; a log recorded elsewhere does not move it.
            workspace_choice.check_resumed(session_id, agent.session.header.get("cwd"), cwd, flag=None)
        except workspace_choice.WorkspaceRefused as exc:
            await agent.dispose()
            raise invalid_params(str(exc)) from None
        state = self.sessions[session_id] = _AcpSession(agent, stored_cwd or cwd, ClientServers([]))
        await self._connect_mcp(state, servers)
        return state

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: object
    ) -> schema.ListSessionsResponse:
        store = self.ctx.get(SESSION_STORE)
        if store is None:
            return schema.ListSessionsResponse(sessions=[])
        try:
            start = int(cursor) if cursor else 0
        except ValueError:
            raise invalid_params(f'bad cursor "{cursor}": pass the nextCursor of the previous page') from None
        # A subagent's session belongs to its parent's conversation, not to the editor's list.
        infos = [
            i for i in await store.list()
            if (cwd is None or i.header.get("cwd") == cwd) and not is_child_header(i.header)
        ]
        page = infos[start : start + LIST_PAGE]
        sessions = []
        for info in page:
            updated = info.modified_ms or info.created_at
            sessions.append(
                schema.SessionInfo(
                    session_id=info.id,
                    cwd=str(info.header.get("cwd") or ""),
                    updated_at=datetime.fromtimestamp(updated / 1000, UTC).isoformat().replace("+00:00", "Z"),
                )
            )
        more = start + LIST_PAGE < len(infos)
        return schema.ListSessionsResponse(sessions=sessions, next_cursor=str(start + LIST_PAGE) if more else None)

    async def prompt(self, session_id: str, prompt: Sequence[PromptBlock], **kwargs: object) -> schema.PromptResponse:
        state = self.sessions.get(session_id)
        if state is None:
            raise _unknown(session_id)
        if state.prompting:
            raise RequestError(
                -32600, f'session "{session_id}" is already running a prompt; wait for its response or send session/cancel'
            )
        content = prompt_content(prompt)
        source = self._prompt_source(kwargs)
        agent = state.agent
        if agent.disposed:
            raise invalid_params(f'session "{session_id}" is closed')
        state.prompting, state.reason, state.last_finish = True, None, None
        state.first_turn = agent.session.last_turn + 1
        try:
            agent.send(content, source=source)
            await agent.when_idle()
            await self._drained()
        finally:
            state.prompting = False
        if state.reason is None:
            raise RequestError(-32603, "the turn did not start (see the agent's log on stderr)")
        return schema.PromptResponse(stop_reason=stop_reason(state.reason, state.last_finish))

    def _prompt_source(self, meta: Mapping[str, object]) -> dict[str, object] | None:
        """The prompt's source: its ``_meta.clientTimeZone`` (checked), else the fallback zone."""
        if _zones.CLIENT_ZONE_KEY in meta:
            value = meta[_zones.CLIENT_ZONE_KEY]
            zone = _zones.canonical_client_zone(value)
            if zone is None:
                raise RequestError(-32602, CLIENT_ZONE_ERROR, {"value": value})
        else:
            zone = self.options.time_zone
        return None if zone is None else _zones.zoned_user_source(zone)

    async def cancel(self, session_id: str, **kwargs: object) -> None:
        state = self.sessions.get(session_id)
        if state is None:
            log.warning('acp: session/cancel for unknown session "%s"', session_id)
            return
        state.agent.cancel("cancelled by the client")

    async def close_session(self, session_id: str, **kwargs: object) -> schema.CloseSessionResponse:
        """End a running turn (``disposed``: the prompt returns ``cancelled``), flush and release
        the session, and stop its client MCP servers; ``session/load`` can open it again."""
        state = self.sessions.get(session_id)
        if state is None:
            raise _unknown(session_id)
        await state.agent.dispose()
        await self._drained()
        if self.sessions.get(session_id) is state:
            del self.sessions[session_id]
        await state.mcp.close()
        log.info("acp: closed session %s", session_id)
        return schema.CloseSessionResponse()

    # -- MCP ---------------------------------------------------------------------------------

    async def _connect_mcp(self, state: _AcpSession, servers: list[McpServer]) -> None:
        state.mcp = ClientServers(servers)
        if not servers:
            return
        found = await connect_for(self.ctx.require(TOOLS), state.agent.id, servers)
        current = self.sessions.get(state.agent.session.id) is state and state.mcp.requested is servers
        if self._closing or not current:
            # Closed, replaced or shutting down while the servers started: nobody would stop them.
            await found.close()
            return
        state.mcp = found

    async def close(self) -> None:
        """Stop the outbox and every session's client MCP servers (the process is ending)."""
        self._closing = True
        if self._sender is not None:
            self._sender.cancel()
        await asyncio.gather(*(s.mcp.close() for s in list(self.sessions.values())), return_exceptions=True)


def _check_cwd(cwd: str) -> None:
    if not os.path.isabs(cwd):
        raise invalid_params(f'cwd must be an absolute path, got "{cwd}"')
    if not os.path.isdir(cwd):
        raise invalid_params(f'cwd "{cwd}" is not a folder')
    why = workspace_choice.refusal(cwd)
    if why is not None:
        raise invalid_params(f'cwd "{cwd}" cannot be a workspace ({why})')
