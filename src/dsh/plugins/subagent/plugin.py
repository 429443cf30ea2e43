"""The ``subagent`` plugin: registers the ``subagent`` tool over :mod:`.service`.

Config (all optional): ``maxDepth`` (3; 0 forbids delegation: the tool stays visible and every
start is refused), ``maxParallel`` (4: children running at once in this process),
``enableRunInBackground`` (true), ``agents`` (``true``: read agent definition files; ``false``:
only the general-purpose child), ``projectAgents`` (true: also the project's trusted files),
``home`` (the dsh home whose ``agents/`` is read; default ``$DSH_HOME``).

Library callers pass definitions directly (:func:`targets_plugin`: ``dsh.Agent(subagents=...)``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import msgspec

from dsh.agent.hooks import SESSION_START, SessionStart
from dsh.plugins.subagent.background import BackgroundRuns
from dsh.plugins.subagent.definitions import AgentDefinition, discover
from dsh.plugins.subagent.lineage import is_child_header
from dsh.plugins.subagent.service import SUBAGENTS, SubagentService, repair_children, store_of
from dsh.plugins.subagent.tool import GENERAL_PURPOSE, parameters, tool_description
from dsh.runtime import Context
from dsh.tools.registry import TOOLS
from dsh.tools.types import ContentBlock, Tool, ToolCall, ToolError, ToolResult, define_tool

__all__ = ["Config", "apply", "inject", "name", "repair_on_resume", "subagent_tool"]

name = "subagent"
inject = ["tools", "agents", "agent_loop"]


class Config(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    max_depth: Annotated[int, msgspec.Meta(ge=0)] = 3
    max_parallel: Annotated[int, msgspec.Meta(ge=1)] = 4
    enable_run_in_background: bool = True
    agents: bool = True
    project_agents: bool = True
    home: str | None = None
    tool_name: str = "subagent"


def _text(text: str) -> list[ContentBlock]:
    return [{"type": "text", "text": text}]


def subagent_tool(
    service: SubagentService | None,
    definitions: Sequence[AgentDefinition],
    *,
    tool_name: str = "subagent",
    background: BackgroundRuns | None = None,
    description: str | None = None,
    fixed: AgentDefinition | None = None,
) -> Tool:
    """The delegation tool over ``definitions`` (or always ``fixed``: ``agent.as_tool``).

    Without ``service`` the calling agent's composition provides it (``SUBAGENTS``).
    """
    by_name = {d.name: d for d in definitions}
    listed = [] if fixed is not None else list(definitions)

    async def execute(args: Any, call: ToolCall) -> ToolResult:
        parent = call.agent
        if parent is None or not hasattr(parent, "session"):
            raise ToolError("subagent tool requires a calling agent")
        runs = service if service is not None else parent.ctx.get(SUBAGENTS)
        if runs is None:
            raise ToolError("subagents unavailable: this composition mounts no subagent service")
        kind = args.get("subagent_type")
        definition = fixed
        if fixed is None and kind not in (None, GENERAL_PURPOSE):
            definition = by_name.get(kind)
            if definition is None:
                known = ", ".join([GENERAL_PURPOSE, *by_name]) or GENERAL_PURPOSE
                raise ToolError(f'unknown subagent_type "{kind}" (available: {known})')
        prompt, label = str(args["prompt"]), str(args["description"])
        if args.get("run_in_background") is True:
            if background is None:
                raise ToolError("run_in_background is disabled for this tool instance (enableRunInBackground: false)")
            runs.check_depth(parent)
            job_id = background.start(runs, parent, call.call_id, prompt, label, definition)
            return ToolResult(content=_text(f"started background subagent task {job_id}"), meta={"jobId": job_id})
        outcome = await runs.run(parent, call.call_id, prompt, label, definition, call.signal)
        meta = {"childSessionId": outcome.session_id, "agent": definition.name if definition else GENERAL_PURPOSE}
        return ToolResult(content=_text(outcome.model_text), is_error=outcome.reason != "completed", meta=meta)

    return define_tool(
        name=tool_name,
        description=description or tool_description(listed, background=background is not None),
        parameters=parameters(listed, background=background is not None and fixed is None),
        execute=execute,
        concurrency_safe=True,
    )


async def apply(ctx: Context, config: Config) -> None:
    service = SubagentService(ctx, max_depth=config.max_depth, max_parallel=config.max_parallel)
    ctx.provide(SUBAGENTS, service)
    definitions: list[AgentDefinition] = []
    if config.agents:
        home = Path(config.home).expanduser() if config.home else None
        definitions = discover(Path(os.getcwd()), home=home, project=config.project_agents)
    background = BackgroundRuns(ctx) if config.enable_run_in_background else None
    if background is not None:
        ctx.defer(background.dispose)
    tool = subagent_tool(service, definitions, tool_name=config.tool_name, background=background)
    ctx.defer(ctx.require(TOOLS).register(tool))
    repair_on_resume(ctx)


def repair_on_resume(ctx: Context) -> None:
    """A resumed top-level session's children get their crash-cut turns closed."""
    pending: set[asyncio.Task[list[str]]] = set()

    def on_start(event: SessionStart) -> None:
        store = store_of(ctx)
        if event.reason != "resume" or store is None or is_child_header(event.agent.session.header):
            return
        task = asyncio.get_running_loop().create_task(repair_children(store, event.agent.session.id))
        pending.add(task)
        task.add_done_callback(pending.discard)

    async def drain() -> None:
        await asyncio.gather(*pending, return_exceptions=True)

    ctx.on(SESSION_START, on_start)
    ctx.defer(drain)
