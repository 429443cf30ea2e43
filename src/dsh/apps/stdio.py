"""stdio-app: one agent ``main`` on a durable session, talked to over stdin and stdout.

Owns the app plugin (it mounts the agent spine, a session store unless one is already mounted,
and agent ``main`` on ``main-session-<uuid4>`` with the process cwd) and the two front ends:

- **plain mode** (stdin or stdout not a TTY, or ``--plain``): exactly the
  reference's rendering (docs/stdio.md); nothing but the transcript on stdout;
- **terminal mode** (:mod:`dsh.apps.terminal`): the reply streams above a persistent input line,
  rendered as Markdown, with slash commands; ``NO_COLOR`` drops only its colour. This module
  provides the session operations its commands use (``switch_model``, ``new_session``,
  ``resume_session``, ``folder_sessions``).

A line typed while the agent runs steers it. ``/compact`` compacts now when compaction is
mounted. At end of input the app waits until the agent is idle with an empty queue, flushes,
and returns.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

import msgspec

from dsh import _zones
from dsh.agent import loop as loop_plugin
from dsh.agent import system_prompt as system_prompt_plugin
from dsh.agent.agent import AGENTS, Agent
from dsh.agent.hooks import REQUEST, JsonMap, RequestConfig
from dsh.agent.sessions import SESSIONS
from dsh.apps import pipes, workspace_choice
from dsh.apps.escape import escape_controls, keep
from dsh.apps.home import default_root
from dsh.apps.store_check import check_writable
from dsh.apps.term.host import Asking
from dsh.compose import app_store_entry, mount_spine
from dsh.llm.service import LLM
from dsh.persistence.base import SESSION_STORE, SessionInfo
from dsh.plugins import turn_outcome
from dsh.plugins.subagent.lineage import is_child_header
from dsh.runtime import Context, ServiceKey
from dsh.session import Event, Session
from dsh.session.vocab import JsonObject

if TYPE_CHECKING:
    from dsh.plugins.compact import Compactor

name = "stdio-app"
log = logging.getLogger("dsh.apps.stdio")

DIM, RESET = "\x1b[2m", "\x1b[0m"


class Config(msgspec.Struct, rename="camel"):
    model: str
    persona: str | None = None
    welcome: str = "ready."
    # $DSH_HOME/sessions, read when the config is loaded (tests point DSH_HOME elsewhere).
    persistence_root: str = msgspec.field(default_factory=lambda: str(default_root()))
    store: str = "jsonl"
    sqlite_path: str | None = None
    resume_session_id: str | None = None
    max_steps_per_turn: int = loop_plugin.DEFAULT_MAX_STEPS
    tool_order: list[str] | None = None
    plain: bool | None = None
    history_file: str | None = None
    # Replaces the default system prompt (the harness identity line) when set.
    system_prompt: str | None = None
    # The zone every prompt carries in its source (UTC or an IANA Area/Location name); none when unset.
    time_zone: str | None = None
    # What /compact says when no compaction is mounted (the default composition: why it is off).
    compaction_off: str | None = None


def _tool_result_text(data: Mapping[str, Any]) -> str:
    return "".join(b.get("text", "") for b in data.get("content") or () if b.get("type") == "text")


class Renderer:
    """Turns session events into transcript text (docs/stdio.md)."""

    def __init__(
        self,
        ctx: Context,
        write: Callable[[str], None],
        *,
        colour: bool,
        prompt: str = "\n> ",
        sanitise: Callable[[str], str] = escape_controls,
    ) -> None:
        self._ctx = ctx
        self._write = write
        self.colour = colour
        # Applied to every piece of text that came from the model, a tool or an error.
        self.sanitise = sanitise
        self.prompt = prompt
        self._in_reasoning = False
        self.on_first_token: Callable[[], None] | None = None
        self.on_reading: Callable[[str], None] | None = None

    def label(self, session: Session) -> str:
        for agent in self._ctx.require(AGENTS).list():
            if agent.session is session:
                return str(agent.id)
        return session.id

    def __call__(self, session: Session, event: Event) -> None:
        kind = event.type
        data = event.data
        write = self._write
        if kind == "assistant/chunk":
            chunk = data.get("chunk") or {}
            ctype = chunk.get("type")
            if ctype == "text-delta":
                self._first_token()
                if self._in_reasoning:
                    self._in_reasoning = False
                    write(RESET + "\n" if self.colour else "\n")
                write(self.sanitise(chunk.get("text", "")))
            elif ctype == "reasoning-delta":
                self._first_token()
                if not self._in_reasoning:
                    self._in_reasoning = True
                    if self.colour:
                        write(DIM)
                write(self.sanitise(chunk.get("text", "")))
        elif kind == "turn/start":
            write(f"\n[{self.sanitise(self.label(session))} turn {data.get('turn')}] ")
        elif kind == "tool/call":
            self._end_reasoning()
            write(self.sanitise(f"\n  [tool call] {data.get('name')}({data.get('arguments')})"))
        elif kind == "tool/result":
            write(self.sanitise(f"\n  [tool result] {_tool_result_text(data)}\n  "))
        elif kind == "turn/end":
            self._end_reasoning()
            self._first_token()
            write(self.prompt)
        elif kind == "context/message" and self.on_reading is not None:
            source = data.get("source") or {}
            if source.get("plugin") == "time-context":
                self.on_reading(self.sanitise(_tool_result_text(data)))

    def _end_reasoning(self) -> None:
        if self._in_reasoning:
            self._in_reasoning = False
            if self.colour:
                self._write(RESET)

    def _first_token(self) -> None:
        if self.on_first_token is not None:
            self.on_first_token()


class StdioApp:
    """The running app: agent ``main`` plus the chosen front end."""

    def __init__(self, ctx: Context, config: Config, agent: Agent) -> None:
        self.ctx = ctx
        self.config = config
        self.agent = agent
        self.submitted = False
        self.output_closed = False  # stdout's reader went away (``dsh chat | head``)
        self._stop_input: Callable[[], None] | None = None
        # The reason of the last turn this run ended (dsh chat's exit status comes from it).
        self.last_turn_reason: JsonObject | None = None
        # The store stopped writing this session (another program wrote to it): exit 1.
        self.persist_stopped = False
        self._remove_model_hook: Callable[[], None] | None = None
        # The running terminal front end (dsh.apps.terminal.TerminalUI), for plugins that ask.
        self.terminal: Asking | None = None
        ctx.defer(ctx.on("session/event", self._on_event))
        ctx.defer(ctx.on("session/persist-stopped", self._on_persist_stopped))

    def _on_persist_stopped(self, session_id: str, error: object) -> None:
        if session_id == self.agent.session.id:
            self.persist_stopped = True

    def _on_event(self, session: Session, event: Event) -> None:
        if event.type == "turn/end" and session is self.agent.session:
            reason = event.data.get("reason")
            self.last_turn_reason = reason if isinstance(reason, dict) else None

    @property
    def failed(self) -> bool:
        """Whether the last turn of this run ended in error, or the session stopped being
        saved (``dsh chat`` then exits 1)."""
        reason = self.last_turn_reason
        return self.persist_stopped or (reason is not None and reason.get("kind") == "error")

    def prompt_source(self) -> JsonObject | None:
        """The source of a typed prompt: carrying the app's ``timeZone`` when it has one (a
        fresh ``rpcId`` each time, as the reference's user-rpc messages have)."""
        zone = self.config.time_zone
        return None if zone is None else _zones.zoned_user_source(zone)

    @property
    def session_id(self) -> str:
        return self.agent.session.id

    def submit(self, line: str) -> str | None:
        """Handle one input line; returns a note to show the user, if any."""
        text = line.strip()
        if not text:
            return None
        if text == "/compact":
            # Imported on first use: most runs never compact, and the module is not small.
            from dsh.plugins.compact import COMPACT

            compact = self.ctx.get(COMPACT)
            if compact is None:
                return self.config.compaction_off or "compaction is not mounted (add the compact plugin to your config)"
            self.submitted = True
            asyncio.get_running_loop().create_task(self._compact_now(compact))
            return None
        content = [{"type": "text", "text": text}]
        source = self.prompt_source()
        if self.agent.status == "running":
            self.agent.steer(content, source=source)
        else:
            self.agent.send(content, source=source)
        self.submitted = True
        return None

    async def _compact_now(self, compact: Compactor) -> None:
        try:
            await compact.compact_now(self.agent)
        except Exception as exc:
            log.warning("compaction failed: %s", exc)

    # -- terminal mode's session commands -----------------------------------------------------

    def switch_model(self, model: str) -> str | None:
        """``/model NAME``: later requests use ``model`` (the loop logs a ``request/header``
        change); returns a problem to show instead when nothing here serves it."""
        llm = self.ctx.require(LLM)
        if not llm.has_model(model):
            return f'model "{escape_controls(model)}" is not served here (served: {", ".join(llm.models())})'
        self.agent.options.model = model
        if self._remove_model_hook is None:
            self._remove_model_hook = self.ctx.on(REQUEST, self._model_hook)
        return None

    async def serve_model(self, model: str) -> str | None:
        """``/model provider:model`` not served yet: mount the provider's adapter for it (the
        endpoint and key from the provider's variables); returns the problem, if any."""
        llm = self.ctx.require(LLM)
        if llm.has_model(model):
            return None
        from dsh.llm import providers
        from dsh.runtime.resolve import resolve_plugin

        try:
            resolved = providers.resolve(model)
            if resolved is None:
                return None  # a bare name: switch_model says whether it is served
            await self.ctx.plugin(resolve_plugin(resolved.plugin), resolved.config)
        except Exception as exc:
            return f"cannot serve {escape_controls(model)}: {escape_controls(str(exc))}"
        return None

    async def _model_hook(self, request: RequestConfig, next_: Callable[[], Awaitable[JsonMap]]) -> JsonMap:
        result = await next_()
        model = request.agent.options.model
        if request.agent is self.agent and model and isinstance(result, dict) and result.get("model") != model:
            result = {**result, "model": model}
        return result

    async def _replace_agent(self, session_id: str | None) -> None:
        loop = self.ctx.require(loop_plugin.AGENT_LOOP)
        model = self.agent.options.model
        if self.agent.status == "running" or self.agent.queued:
            self.agent.cancel("session switched")
        await self.settle()
        await self.agent.dispose()
        if session_id is None:
            self.agent = loop.create("main", model=model, cwd=os.getcwd())
        else:
            self.agent = await loop.resume("main", session_id)
        self.last_turn_reason = None

    async def new_session(self) -> None:
        """``/clear``: agent ``main`` continues on a fresh session; the old one stays stored."""
        await self._replace_agent(None)

    async def resume_session(self, session_id: str) -> None:
        """``/resume ID``: agent ``main`` continues the stored session ``session_id``."""
        await self._replace_agent(session_id)

    async def folder_sessions(self) -> list[SessionInfo]:
        """Stored sessions of this folder, newest first, without the current one."""
        here = os.getcwd()
        infos = await self.ctx.require(SESSION_STORE).list()
        return [
            i for i in infos
            if i.header.get("cwd") == here and i.id != self.session_id and not is_child_header(i.header)
        ]

    def set_stop_input(self, callback: Callable[[], None]) -> None:
        self._stop_input = callback

    def stop_input(self) -> None:
        """End input as if stdin closed (used for Ctrl-C at an idle prompt and SIGTERM)."""
        if self._stop_input is not None:
            self._stop_input()

    async def settle(self) -> None:
        """Wait until the agent is idle with nothing queued, then flush."""
        agent = self.agent
        while not agent.disposed and (agent.status == "running" or agent.queued or agent.steering):
            await agent.when_idle()
        await self.ctx.require(SESSIONS).flush(agent.session)

    async def run(self, *, stdin: TextIO | None = None, stdout: TextIO | None = None, plain: bool | None = None) -> None:
        stdin = stdin or sys.stdin
        stdout = stdout or sys.stdout
        if plain is None:
            plain = self.config.plain
        if plain is None:
            # NO_COLOR drops colour only: a terminal keeps terminal mode and its line editing.
            plain = not (stdin.isatty() and stdout.isatty())
        if plain:
            await self._run_plain(stdin, stdout)
        else:
            from dsh.apps.terminal import run_terminal

            await run_terminal(self, stdout)

    def _output_gone(self) -> None:
        """Nobody reads stdout any more: stop, as SIGPIPE stops a Unix tool, but cleanly (the
        running turn is cancelled and recorded, the log flushed), without a traceback."""
        if self.output_closed:
            return
        self.output_closed = True
        pipes.silence_stdout()
        if self.agent.status == "running" or self.agent.queued:
            self.agent.cancel("output closed")
        self.stop_input()

    async def _run_plain(self, stdin: TextIO, stdout: TextIO) -> None:
        def write(text: str) -> None:
            if self.output_closed:
                return
            try:
                stdout.write(text)
                stdout.flush()
            except BrokenPipeError:
                self._output_gone()

        # Byte-exact to a pipe or file; a person's terminal never obeys model-sent controls.
        renderer = Renderer(self.ctx, write, colour=False, sanitise=escape_controls if _isatty(stdout) else keep)
        remove = self.ctx.on("session/event", renderer)
        write(f"{self.config.welcome}\n> ")
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()

        def reader() -> None:
            try:
                for line in stdin:
                    loop.call_soon_threadsafe(lines.put_nowait, line)
            except (OSError, ValueError):
                pass
            finally:
                loop.call_soon_threadsafe(lines.put_nowait, None)

        threading.Thread(target=reader, name="dsh-stdin", daemon=True).start()
        self.set_stop_input(lambda: lines.put_nowait(None))
        try:
            while (line := await lines.get()) is not None and not self.output_closed:
                note = self.submit(line)
                if note:
                    print(f"dsh: {note}", file=sys.stderr)
            if self.submitted:
                await self.settle()
        finally:
            remove()


STDIO_APP: ServiceKey[StdioApp] = ServiceKey("stdio_app")


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError):
        return False


async def apply(ctx: Context, config: Config) -> None:
    config.time_zone = _zones.checked_config_zone(name, config.time_zone)
    # A composition may already mount parts of the spine (or a store): mount_spine reuses them.
    await mount_spine(
        ctx,
        tool_order=config.tool_order,
        loop_config={"maxStepsPerTurn": config.max_steps_per_turn, "freezeHistory": True},
        store=None
        if ctx.has(SESSION_STORE)
        else app_store_entry(config.store, config.persistence_root, config.sqlite_path),
    )
    prompt = ctx.require(system_prompt_plugin.SYSTEM_PROMPT)
    if config.system_prompt is not None:
        prompt.remove_section(system_prompt_plugin.IDENTITY_ID)
        ctx.defer(prompt.add_section("deployment:system", config.system_prompt, order=-100))
    if not ctx.has(turn_outcome.TURN_OUTCOME):
        # After a cancelled or failed turn, the next request says so (plain and terminal mode).
        await ctx.plugin(turn_outcome)
    if config.persona:
        ctx.defer(prompt.add_section("deployment:persona", config.persona, order=0))
    # Before any session exists: an unwritable store would lose the conversation at its first flush.
    check_writable(ctx.require(SESSION_STORE))
    loop = ctx.require(loop_plugin.AGENT_LOOP)
    if config.resume_session_id:
        agent = await loop.resume("main", config.resume_session_id, model=config.model)
        try:
            # dsh chat/run checked this before loading; a composition's resumeSessionId did not.
            workspace_choice.check_resumed(agent.session.id, agent.session.header.get("cwd"), os.getcwd())
        except workspace_choice.WorkspaceRefused:
            await agent.dispose()
            raise
    else:
        workspace_choice.check_new(os.getcwd())
        agent = loop.create("main", model=config.model, cwd=os.getcwd())
    ctx.provide(STDIO_APP, StdioApp(ctx, config, agent))
