"""The library API: ``dsh.Agent``, ``dsh.RunResult`` and the run methods.

An :class:`Agent` is a configuration (model, instructions, tools, store, time-context) plus, per
event loop, one mounted composition (:mod:`dsh.compose`) that it builds on first use. Each
session id maps to one live loop agent; ``run`` sends the prompt as one turn, waits until the
agent is idle, flushes, and returns what that run appended. Running the same ``session_id``
again continues the session: from memory in this process, or through the store (crash repair
applied) in a new one. A session that another process has open for writing raises the store's
one-writer error (``session "<id>" is open in another process``).

The durable log is the only record: ``RunResult.events`` and ``run_stream`` yield the very
:class:`~dsh.session.Event` objects the loop appended, and the result's text and reason are read
from them.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from dsh import _zones
from dsh.agent.loop import AGENT_LOOP
from dsh.agent.sessions import SESSIONS
from dsh.agent.system_prompt import SYSTEM_PROMPT
from dsh.compose import SESSION_STORE, mount_rewind, mount_spine, mount_store, store_entry
from dsh.errors import RunError
from dsh.llm.service import LLM
from dsh.llm.types import Adapter
from dsh.runtime import Context
from dsh.runtime.loader import PluginEntry
from dsh.session import Event, Session
from dsh.tools.registry import TOOLS
from dsh.tools.types import Tool

if TYPE_CHECKING:
    from dsh.agent.agent import Agent as LoopAgent
    from dsh.persistence.base import SessionStore
    from dsh.rewind.library import RewindResult

__all__ = ["Agent", "RunResult"]

ECHO_MODEL = "mock-echo"
StoreSpec: TypeAlias = "str | os.PathLike[str] | SessionStore"
Prompt: TypeAlias = "str | Sequence[Mapping[str, object]]"
PluginSpec: TypeAlias = "object | tuple[object, Mapping[str, object] | None]"


@dataclass(frozen=True)
class RunResult:
    """What one run appended: ``text`` (the final assistant text), ``session_id``, ``events`` (in
    seq order) and ``reason`` (the ``turn/end`` reason, e.g. ``{"kind": "completed"}``)."""

    text: str
    session_id: str
    events: tuple[Event, ...] = field(repr=False)
    reason: dict[str, object]


def _text_of(events: Sequence[Event]) -> str:
    """The text blocks of the last ``assistant/message`` among ``events``."""
    for event in reversed(events):
        if event.type == "assistant/message":
            content = event.data.get("content") if isinstance(event.data, Mapping) else None
            return "".join(
                str(block.get("text", ""))
                for block in content or ()
                if isinstance(block, Mapping) and block.get("type") == "text"
            )
    return ""


def _turn_reason(events: Sequence[Event]) -> dict[str, object] | None:
    for event in reversed(events):
        if event.type == "turn/end" and isinstance(event.data, Mapping):
            reason = event.data.get("reason")
            if isinstance(reason, Mapping):
                return dict(reason)
    return None


def _content(prompt: Prompt) -> list[dict[str, object]]:
    if isinstance(prompt, str):
        return [{"type": "text", "text": prompt}]
    return [dict(block) for block in prompt]


def _source(time_zone: str | None) -> dict[str, object] | None:
    """The prompt's source: the plain user source, or one carrying the checked zone."""
    if time_zone is None:
        return None
    zone = _zones.canonical_client_zone(time_zone)
    if zone is None:
        raise ValueError(_zones.client_zone_error("time_zone", time_zone))
    return _zones.zoned_user_source(zone)


class _Runtime:
    """The composition mounted for one event loop, and its live agents by session id."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ctx: Context) -> None:
        self.loop = loop
        self.ctx = ctx
        self.agents: dict[str, LoopAgent] = {}
        self.locks: dict[str, asyncio.Lock] = {}

    def lock(self, session_id: str) -> asyncio.Lock:
        return self.locks.setdefault(session_id, asyncio.Lock())


class Agent:
    """An agent on dsh's durable log.

    ``model`` is a model name (``mock-echo`` is keyless; a ``provider:model`` name such as
    ``anthropic:claude-sonnet-4-5`` picks its provider's adapter, endpoint and key as the CLI
    does; any other name is served by the OpenAI-compatible adapter, DeepSeek by default, or
    ``base_url``) or an adapter object with
    ``stream(request)``. ``instructions`` replace the default system prompt. ``tools`` are
    ``@dsh.tool`` functions or :class:`dsh.tools.Tool` objects. ``store`` is a JSONL root
    folder, ``"sqlite:///FILE"``, ``"postgresql://…"`` or a store object; ``None`` keeps sessions
    in memory only. ``time_context`` is ``True`` (default: the seed's two-line reading), ``False``
    or the plugin's config (``{"timeZone": ..., "refreshIntervalMs": ..., "zoneLine": True,
    "stepOneBaseline": "previousExchange"}``). ``plugins`` mounts further plugins, each a plugin
    or a ``(plugin, config)`` pair. ``rewind`` (``True`` or the plugin's config) takes workspace
    snapshots before file-changing steps, for :meth:`rewind`.

    ``run(..., time_zone="Asia/Tokyo")`` (and ``run_stream``, ``run_sync``) records the zone of
    the person behind this prompt in its durable source, so the reading of that turn is in their
    zone (a web service serving many zones passes each request's own); ``UTC`` or an IANA
    ``Area/Location`` name, anything else raises ``ValueError`` before anything is appended.

    Use ``async with dsh.Agent(...) as agent`` (or ``await agent.aclose()``) to release the
    sessions it holds open; ``run_sync`` releases them after every call.
    """

    def __init__(
        self,
        *,
        model: str | Adapter = ECHO_MODEL,
        instructions: str | None = None,
        tools: Sequence[Tool] = (),
        store: StoreSpec | None = None,
        time_context: bool | Mapping[str, object] = True,
        cwd: str | None = None,
        base_url: str | None = None,
        max_steps_per_turn: int | None = None,
        plugins: Sequence[PluginSpec] = (),
        rewind: bool | Mapping[str, object] = False,
        subagents: Sequence[Agent] = (),
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        for t in tools:
            if not isinstance(t, Tool):
                raise TypeError(f"tools: expected @dsh.tool functions or Tool objects, got {type(t).__name__}")
        if isinstance(model, str):
            if not model:
                raise ValueError("model must be a non-empty model name or an adapter")
        elif not callable(getattr(model, "stream", None)):
            raise TypeError("model must be a model name or an adapter with stream(request)")
        # A spec is parsed (and a relative path resolved) now: a bad spec fails here, not at the
        # first run, and a later chdir does not move the sessions.
        self._store: PluginEntry | SessionStore | None = (
            store_entry(store) if isinstance(store, (str, os.PathLike)) else store
        )
        self.model = model
        self.model_name = model if isinstance(model, str) else str(getattr(model, "model", None) or "custom")
        self.instructions = instructions
        self.tools = tuple(tools)
        self.store = store
        self.time_context = time_context
        self.cwd = cwd
        self.base_url = base_url
        self.max_steps_per_turn = max_steps_per_turn
        self.plugins = tuple(plugins)
        self.rewind_config = rewind
        for sub in subagents:
            if not isinstance(sub, Agent):
                raise TypeError(f"subagents: expected dsh.Agent objects, got {type(sub).__name__}")
        self.subagents = tuple(subagents)
        self.name = name
        self.description = description
        self._runtime: _Runtime | None = None

    def __repr__(self) -> str:
        return f"dsh.Agent(model={self.model_name!r}, tools={[t.name for t in self.tools]!r})"

    def as_tool(self, *, name: str, description: str) -> Tool:
        """A ``name`` tool another agent calls to delegate a task to this agent; each call runs
        this agent as a child session in the caller's store and returns its final text."""
        from dsh.plugins.subagent.library import as_tool

        return as_tool(self, name, description)

    # -- running ---------------------------------------------------------------------------

    async def run(
        self, prompt: Prompt, *, session_id: str | None = None, time_zone: str | None = None
    ) -> RunResult:
        """Run one turn on ``session_id`` (new or resumed; generated when omitted), the prompt
        carrying ``time_zone`` when given.

        Raises :class:`dsh.RunError` when the turn ends in error, after its events are durable.
        """
        events: list[Event] = []
        stream = self._stream(prompt, session_id, events, time_zone)
        result: RunResult | None = None
        async for item in stream:
            if isinstance(item, RunResult):
                result = item
        assert result is not None
        return result

    def run_sync(
        self, prompt: Prompt, *, session_id: str | None = None, time_zone: str | None = None
    ) -> RunResult:
        """``run`` for scripts: its own event loop, and the session released afterwards."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("run_sync() cannot run inside an event loop; use await agent.run(...)")
        _source(time_zone)  # a bad zone raises here, before an event loop starts

        async def once() -> RunResult:
            try:
                return await self.run(prompt, session_id=session_id, time_zone=time_zone)
            finally:
                await self.aclose()

        return asyncio.run(once())

    async def run_stream(
        self, prompt: Prompt, *, session_id: str | None = None, time_zone: str | None = None
    ) -> AsyncIterator[Event]:
        """Yield every event the run appends, as it is appended (streamed ``assistant/chunk``
        events included). Closing the iterator early cancels the turn if it is still running (it
        ends ``aborted``).
        Raises :class:`dsh.RunError` at the end when the turn ended in error."""
        async for item in self._stream(prompt, session_id, [], time_zone):
            if isinstance(item, Event):
                yield item

    async def _stream(
        self, prompt: Prompt, session_id: str | None, events: list[Event], time_zone: str | None = None
    ) -> AsyncIterator[Event | RunResult]:
        source = _source(time_zone)
        content = _content(prompt)
        runtime = await self._ensure_runtime()
        sid = session_id if session_id is not None else f"session-{uuid.uuid4()}"
        async with runtime.lock(sid):
            agent = await self._agent_for(runtime, sid, resume=session_id is not None)
            queue: asyncio.Queue[Event] = asyncio.Queue()

            def observe(session: Session, event: Event) -> None:
                queue.put_nowait(event)

            unsubscribe = agent.session.subscribe(observe)
            finished = False
            try:
                agent.send(content, source=source)
                idle = asyncio.ensure_future(agent.when_idle())
                try:
                    while True:
                        getter = asyncio.ensure_future(queue.get())
                        done, _ = await asyncio.wait({getter, idle}, return_when=asyncio.FIRST_COMPLETED)
                        if getter not in done:
                            getter.cancel()
                            break
                        event = getter.result()
                        events.append(event)
                        yield event
                    while not queue.empty():
                        event = queue.get_nowait()
                        events.append(event)
                        yield event
                    finished = True
                finally:
                    if not finished:
                        # The caller stopped listening: end the turn cleanly rather than leave it
                        # running unobserved.
                        agent.cancel("run_stream closed")
                        await agent.when_idle()
                    idle.cancel()
            finally:
                unsubscribe()
            if not agent.disposed:
                await runtime.ctx.require(SESSIONS).flush(agent.session)
            else:
                runtime.agents.pop(sid, None)
        reason = _turn_reason(events)
        if reason is None:
            reason = {"kind": "error", "message": "the turn did not start (see the log for the cause)"}
        if reason.get("kind") == "error":
            message = str(reason.get("message") or "the turn ended in error")
            raise RunError(message, reason=reason, session_id=sid, events=events)
        yield RunResult(text=_text_of(events), session_id=sid, events=tuple(events), reason=reason)

    async def rewind(
        self, session_id: str, *, turn: int, files: bool = True, conversation: bool = False, force: bool = False
    ) -> RewindResult:
        """Go back to before ``turn`` (see ``dsh sessions rewind``): restore the files the agent
        changed since, and/or fork the conversation before it into a new session (the result's
        ``session_id``). Raises ``dsh.rewind.ops.Conflict`` for files changed after the agent
        unless ``force``."""
        from dsh.rewind.library import rewind_session

        runtime = await self._ensure_runtime()
        async with runtime.lock(session_id):
            live = runtime.agents.get(session_id)
            session = live.session if live is not None and not live.disposed else None
            return await rewind_session(
                runtime.ctx, session, session_id, turn, files=files, conversation=conversation, force=force
            )

    # -- lifecycle --------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Finish and release every session this agent holds open (idempotent)."""
        runtime, self._runtime = self._runtime, None
        if runtime is not None:
            await runtime.ctx.dispose()

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _ensure_runtime(self) -> _Runtime:
        loop = asyncio.get_running_loop()
        runtime = self._runtime
        if runtime is not None:
            if runtime.loop is loop:
                return runtime
            if not runtime.loop.is_closed() and runtime.loop.is_running():
                raise RuntimeError("this dsh.Agent is in use by another event loop")
            # Its loop is gone (a previous asyncio.run): its tasks died with it; start afresh.
            self._runtime = None
        ctx = Context()
        try:
            await self._compose(ctx)
        except BaseException:
            await ctx.dispose()
            raise
        self._runtime = _Runtime(loop, ctx)
        return self._runtime

    async def _compose(self, ctx: Context) -> None:
        loop_config: dict[str, object] = {}
        if self.max_steps_per_turn is not None:
            loop_config["maxStepsPerTurn"] = self.max_steps_per_turn
        await mount_spine(ctx, loop_config=loop_config)
        if self._store is not None:
            await mount_store(ctx, self._store)
        if isinstance(self.model, str):
            await self._mount_model(ctx, self.model)
        else:
            ctx.defer(ctx.require(LLM).register_adapter([self.model_name], self.model))
        tools = ctx.require(TOOLS)
        for t in self.tools:
            ctx.defer(tools.register(t))
        if self.instructions is not None:
            prompt = ctx.require(SYSTEM_PROMPT)
            prompt.remove_section("harness:identity")
            ctx.defer(prompt.add_section("agent:instructions", self.instructions, order=-100))
        if self.time_context is not False:
            from dsh.plugins import time_context

            config = None if self.time_context is True else dict(self.time_context)
            await ctx.plugin(time_context, config)
        for spec in self.plugins:
            plugin, config = spec if isinstance(spec, tuple) else (spec, None)
            await ctx.plugin(plugin, config)
        if self.rewind_config is not False:
            await mount_rewind(ctx, None if self.rewind_config is True else self.rewind_config)
        from dsh.plugins.subagent import library

        agent_tools = [a for a in map(library.agent_of, self.tools) if a is not None]
        if self.subagents or agent_tools:
            library.mount(ctx, self.subagents, agent_tools)

    async def _mount_model(self, ctx: Context, model: str) -> None:
        if model == ECHO_MODEL and self.base_url is None:
            from dsh.llm import echo

            await ctx.plugin(echo, {"delayMs": 0})
            return
        from dsh.llm import openai_compat, providers
        from dsh.runtime.resolve import resolve_plugin

        resolved = providers.resolve(model, self.base_url)
        if resolved is not None:  # "anthropic:claude-…": the provider's adapter, as the CLI does
            await ctx.plugin(resolve_plugin(resolved.plugin), resolved.config)
            return
        config: dict[str, object] = {"models": [model]}
        if self.base_url is not None:
            config["baseURL"] = self.base_url
            if not os.environ.get("DEEPSEEK_API_KEY") and not os.environ.get("OPENAI_API_KEY"):
                config["apiKey"] = "not-needed"  # local servers usually take no key
            elif os.environ.get("OPENAI_API_KEY") and not os.environ.get("DEEPSEEK_API_KEY"):
                config["apiKeyEnv"] = "OPENAI_API_KEY"
        await ctx.plugin(openai_compat, config)

    async def _agent_for(self, runtime: _Runtime, session_id: str, *, resume: bool) -> LoopAgent:
        live = runtime.agents.get(session_id)
        if live is not None and not live.disposed:
            return live
        ctx = runtime.ctx
        loop = ctx.require(AGENT_LOOP)
        agent: LoopAgent | None = None
        if resume and ctx.has(SESSION_STORE):
            from dsh.persistence.base import SessionNotFound

            try:
                agent = await loop.resume(session_id, session_id, model=self.model_name)
            except SessionNotFound:
                agent = None
        if agent is None:
            agent = loop.create(
                session_id, model=self.model_name, cwd=self.cwd or os.getcwd(), session_id=session_id
            )
        runtime.agents[session_id] = agent
        return agent
