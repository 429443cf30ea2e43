"""The ``hooks`` plugin: Claude Code command hooks from the settings files, on dsh's seams.

| event | seam | what it can do |
|---|---|---|
| ``SessionStart`` | first prompt of a session in this process (``agent/prompt-submit``), matcher ``startup``/``resume`` | ``additionalContext`` (or plain stdout) becomes a context message before the prompt |
| ``UserPromptSubmit`` | ``agent/prompt-submit`` | exit 2 / ``decision: block`` blocks the prompt (``prompt/blocked``, reason on stderr); ``additionalContext`` (or plain stdout) becomes a context message after it |
| ``PreToolUse`` | the tool registry's pre-tool hook, before the approval policy | ``deny`` / exit 2 refuses (``Error: <stderr or reason>``), ``ask`` asks, ``allow`` counts as a rule |
| ``PostToolUse`` | the registry's post-tool hook (successful calls) | exit 2 / ``block``: the reason is appended to the result; ``additionalContext`` becomes a context message |
| ``Stop`` | ``agent/turn-continuation`` when the turn would end | exit 2 / ``block``: the reason is a context message and the turn continues, at most ``maxStopBlocks`` (3) times a turn |
| ``SubagentStop`` | none: dsh has no subagents yet; accepted, never fires | |
| ``PreCompact`` | a ``compact/start`` in the log (matcher ``auto``) | observe only |
| ``SessionEnd`` | the agent's disposal (``reason: other``) | observe only; not recorded (no open turn) |
| ``Notification`` | an ``approval/asked`` in the log (matcher ``permission_prompt``) | observe only |

Context messages carry ``source {"kind": "plugin", "plugin": "hooks-claude-code"}`` (the
reference's), so requests stay rebuildable from the log and the prompt cache holds.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

from dsh.agent.agent import AGENTS
from dsh.agent.hooks import (
    AGENT_DISPOSED,
    PROMPT_SUBMIT,
    SESSION_EVENT,
    TURN_CONTINUATION,
    AgentOnly,
    JsonMap,
    PromptSubmit,
    SessionEvent,
    TurnContinuation,
)
from dsh.plugins.hooks.config import Config, Hook, claude_name, collect, names_of
from dsh.plugins.hooks.engine import Folded, HookEngine
from dsh.runtime import Context
from dsh.runtime.keys import ServiceKey
from dsh.settings import Settings, load_settings
from dsh.tools.interception import PreToolDecision
from dsh.tools.registry import TOOLS
from dsh.tools.types import Tool, ToolCall, ToolResult

__all__ = ["HOOKS", "SOURCE", "Config", "HooksService", "apply", "inject", "name"]

log = logging.getLogger("dsh.hooks")

name = "hooks"
inject: list[str] = ["tools"]

SOURCE: Final = {"kind": "plugin", "plugin": "hooks-claude-code"}
POST_FEEDBACK: Final = "blocked by PostToolUse hook"
STOP_FEEDBACK: Final = "continue: blocked by Stop hook"
PROMPT_FEEDBACK: Final = "blocked by UserPromptSubmit hook"


def _text_context(texts: list[str]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": t} for t in texts], "source": dict(SOURCE)}


def _tool_input(call: ToolCall, cwd: str) -> object:
    args = call.arguments
    if isinstance(args, Mapping) and isinstance(args.get("file_path"), str) and not os.path.isabs(args["file_path"]):
        # Claude Code always passes an absolute file_path; scripts rely on it.
        return {**args, "file_path": os.path.join(cwd, args["file_path"])}
    return args


def _result_text(result: ToolResult) -> str:
    return "".join(str(b.get("text", "")) for b in result.content if isinstance(b, Mapping))


class HooksService:
    """The hooks in force (``/hooks``) and the listeners that run them."""

    def __init__(self, ctx: Context, config: Config, settings: Settings, hooks: list[Hook]) -> None:
        self.ctx = ctx
        self.config = config
        self.settings = settings
        self.engine = HookEngine(ctx, config, hooks)
        self._started: set[str] = set()
        self._stop_blocks: dict[tuple[str, int], int] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def hooks(self) -> list[Hook]:
        return self.engine.hooks

    def describe(self) -> list[str]:
        """The hooks in force, one a line with where each came from; then untrusted files."""
        lines = [
            f"{h.event} {h.matcher or '*'}: {h.command}  ({h.source}{', timeout ' + format(h.timeout_s, 'g') + 's' if h.timeout_s else ''})"
            for h in self.hooks
        ]
        if not lines:
            lines.append("no hooks in force")
        for entry in self.settings.section("hooks", include_untrusted=True):
            if not entry.trusted:
                lines.append(f"not in force (untrusted): {entry.file}; review and trust it with: dsh trust")
        return lines

    # -- prompts -------------------------------------------------------------------------

    async def on_prompt(self, submit: PromptSubmit, next_: Callable[[], Awaitable[JsonMap]]) -> JsonMap:
        agent = submit.agent
        session = agent.session
        contexts: list[str] = []
        if session.id not in self._started:
            self._started.add(session.id)
            source = "resume" if any(e.type == "turn/end" for e in session.events) else "startup"
            payload = {**self.engine.base_payload(agent, "SessionStart"), "source": source}
            started = await self.engine.run("SessionStart", agent, payload, subjects=(source,))
            if started.contexts:
                agent.inject(_text_context(started.contexts)["content"], source=dict(SOURCE))
        if submit.source.get("kind") == "user":
            prompt = "".join(str(b.get("text", "")) for b in submit.content if isinstance(b, Mapping))
            payload = {**self.engine.base_payload(agent, "UserPromptSubmit"), "prompt": prompt}
            folded = await self.engine.run("UserPromptSubmit", agent, payload)
            if folded.decision == "deny":
                reason = folded.reason or PROMPT_FEEDBACK
                log.warning("prompt blocked by a UserPromptSubmit hook: %s", reason)
                return {"kind": "block", "reason": reason}
            contexts = folded.contexts
        downstream = await next_()
        if not contexts or downstream.get("kind", "allow") != "allow":
            return downstream
        return {**downstream, "additionalContexts": [*(downstream.get("additionalContexts") or ()), _text_context(contexts)]}  # type: ignore[misc]

    # -- tools ---------------------------------------------------------------------------

    async def pre_tool(self, tool: Tool, call: ToolCall) -> PreToolDecision:
        agent = call.agent
        if agent is None or getattr(agent, "session", None) is None or not self.engine.selected("PreToolUse", names_of(tool.name)):
            return PreToolDecision()
        payload = self._tool_payload(agent, "PreToolUse", call)
        folded = await self.engine.run("PreToolUse", agent, payload, subjects=names_of(tool.name), signal=call.signal)
        if call.signal.aborted:
            # Cancelled while its hook ran: the call must not start (the loop ends the turn).
            return PreToolDecision("deny", str(call.signal.reason))
        contexts = (_text_context(folded.contexts),) if folded.contexts else ()
        kind = folded.decision if folded.decision in ("allow", "ask", "deny") else "none"
        return PreToolDecision(kind, folded.reason, contexts)  # type: ignore[arg-type]

    async def post_tool(self, tool: Tool, call: ToolCall, result: ToolResult) -> ToolResult:
        agent = call.agent
        if agent is None or getattr(agent, "session", None) is None or not self.engine.selected("PostToolUse", names_of(tool.name)):
            return result
        payload = {**self._tool_payload(agent, "PostToolUse", call), "tool_response": _result_text(result)}
        folded = await self.engine.run("PostToolUse", agent, payload, subjects=names_of(tool.name), signal=call.signal)
        content = list(result.content)
        if folded.decision == "deny":
            content.append({"type": "text", "text": folded.reason or POST_FEEDBACK})
        contexts = list(result.additional_contexts or ())
        if folded.contexts:
            contexts.append(_text_context(folded.contexts))
        if not folded.contexts and folded.decision != "deny":
            return result
        from dataclasses import replace

        return replace(result, content=content, additional_contexts=contexts or None)

    def _tool_payload(self, agent: Any, event: str, call: ToolCall) -> dict[str, Any]:
        cwd = str(agent.session.header.get("cwd") or os.getcwd())
        return {
            **self.engine.base_payload(agent, event),
            "tool_name": claude_name(call.name),
            "tool_input": _tool_input(call, cwd),
            "tool_use_id": call.call_id,
        }

    # -- the end of a turn ---------------------------------------------------------------

    async def on_continuation(self, cont: TurnContinuation, next_: Callable[[], Awaitable[object]]) -> object:
        decision = await next_()
        action = decision if isinstance(decision, str) else (decision.get("action") if isinstance(decision, Mapping) else None)
        if action == "continue" or not self.engine.selected("Stop", ()):
            return decision
        agent = cont.agent
        key = (agent.session.id, cont.turn)
        blocks = self._stop_blocks.get(key, 0)
        if blocks >= self.config.max_stop_blocks:
            return decision
        payload = {**self.engine.base_payload(agent, "Stop"), "stop_hook_active": blocks > 0}
        folded = await self.engine.run("Stop", agent, payload)
        if folded.decision != "deny":
            return decision
        self._stop_blocks[key] = blocks + 1
        agent.inject([{"type": "text", "text": folded.reason or STOP_FEEDBACK}], source=dict(SOURCE))
        return "continue"

    # -- observed events -----------------------------------------------------------------

    def _spawn(self, work: Awaitable[Folded]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception as exc:  # a hook never takes the turn down
                log.warning("hook failed: %s", exc)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def on_session_event(self, observed: SessionEvent) -> None:
        event = observed.event
        if event.type not in ("approval/asked", "compact/start"):
            return
        agent = self._agent_of(observed.session)
        if agent is None:
            return
        if event.type == "approval/asked" and self.engine.selected("Notification", ("permission_prompt",)):
            tool = claude_name(str(event.data.get("toolName", "")))
            payload = {
                **self.engine.base_payload(agent, "Notification"),
                "message": f"dsh needs your permission to use {tool}",
                "notification_type": "permission_prompt",
            }
            self._spawn(self.engine.run("Notification", agent, payload, subjects=("permission_prompt",)))
        elif event.type == "compact/start" and self.engine.selected("PreCompact", ("auto",)):
            payload = {**self.engine.base_payload(agent, "PreCompact"), "trigger": "auto", "custom_instructions": ""}
            self._spawn(self.engine.run("PreCompact", agent, payload, subjects=("auto",)))

    def _agent_of(self, session: Any) -> Any:
        registry = self.ctx.get(AGENTS)
        for agent in registry or ():
            if agent.session is session:
                return agent
        return None

    def on_disposed(self, disposed: AgentOnly) -> None:
        agent = disposed.agent
        if self.engine.selected("SessionEnd", ("other",)):
            payload = {**self.engine.base_payload(agent, "SessionEnd"), "reason": "other"}
            self._spawn(self.engine.run("SessionEnd", agent, payload, subjects=("other",)))

    async def drain(self) -> None:
        """At dispose: let the hooks still running finish (each is bounded by its timeout)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


HOOKS: ServiceKey[HooksService] = ServiceKey("hooks")
"""The hooks service (``ctx.get(HOOKS)``): what ``/hooks`` lists."""


def apply(ctx: Context, config: Config) -> None:
    settings = load_settings(Path.cwd())
    hooks, warnings = collect(settings)
    for warning in warnings:
        log.warning("%s", warning)
    service = HooksService(ctx, config, settings, hooks)
    ctx.provide(HOOKS, service)
    ctx.defer(service.drain)
    if not hooks:
        return  # nothing to run: no listener, no per-call cost
    registry = ctx.require(TOOLS)
    ctx.defer(registry.add_pre_tool_hook(service.pre_tool))
    ctx.defer(registry.add_post_tool_hook(service.post_tool))
    ctx.on(PROMPT_SUBMIT, service.on_prompt)
    ctx.on(TURN_CONTINUATION, service.on_continuation)
    ctx.on(SESSION_EVENT, service.on_session_event)
    ctx.on(AGENT_DISPOSED, service.on_disposed)
