"""Delegation for the library: ``dsh.Agent(..., subagents=[other, ...])`` and
``agent.as_tool(name=..., description=...)``.

A library target is another ``dsh.Agent`` configuration run as a child inside the calling
agent's composition: its ``instructions`` are the child's system prompt (dsh's general-purpose
child prompt without them), its ``tools`` the child's whole tool set (registered for the child
alone), its model the child's (an adapter object is served under its name). The child session is
written to the parent's store, linked as every child is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from dsh.llm.service import LLM
from dsh.llm.types import LlmError
from dsh.plugins.subagent.definitions import AgentDefinition
from dsh.plugins.subagent.plugin import repair_on_resume, subagent_tool
from dsh.plugins.subagent.service import GENERAL_SYSTEM, SUBAGENTS, SubagentService
from dsh.runtime import Context
from dsh.tools.registry import TOOLS
from dsh.tools.types import Tool

__all__ = ["agent_of", "as_tool", "definition_of", "mount"]

# id(tool) -> the dsh.Agent an ``as_tool`` tool delegates to (its model must be served by the
# composition that registers the tool).
_AGENT_TOOLS: dict[int, Any] = {}


def agent_of(tool: Tool) -> Any:
    return _AGENT_TOOLS.get(id(tool))


def definition_of(agent: Any, name: str | None = None, description: str | None = None) -> AgentDefinition:
    """The delegation target a ``dsh.Agent`` configuration describes."""
    label = name or getattr(agent, "name", None) or "subagent"
    return AgentDefinition(
        name=label,
        description=description or getattr(agent, "description", None) or "",
        prompt=agent.instructions or GENERAL_SYSTEM,
        model=agent.model_name,
        own_tools=tuple(agent.tools),
    )


def _serve_models(ctx: Context, agents: Sequence[Any]) -> None:
    llm = ctx.require(LLM)
    for agent in agents:
        if not isinstance(agent.model, str) and not llm.has_model(agent.model_name):
            with contextlib.suppress(LlmError):  # served meanwhile under an equal name
                ctx.defer(llm.register_adapter([agent.model_name], agent.model))


def mount(ctx: Context, subagents: Sequence[Any], agent_tools: Sequence[Any], *, max_depth: int = 3, max_parallel: int = 4) -> None:
    """Provide the delegation service and, with ``subagents``, the ``subagent`` tool over them."""
    if not ctx.has(SUBAGENTS):
        ctx.provide(SUBAGENTS, SubagentService(ctx, max_depth=max_depth, max_parallel=max_parallel))
        repair_on_resume(ctx)
    _serve_models(ctx, [*subagents, *agent_tools])
    if subagents:
        definitions = [definition_of(a) for a in subagents]
        names = [d.name for d in definitions]
        if len(set(names)) != len(names):
            raise ValueError(f"subagents: two agents share a name ({', '.join(names)}); give each a name=")
        ctx.defer(ctx.require(TOOLS).register(subagent_tool(None, definitions)))


def as_tool(agent: Any, name: str, description: str) -> Tool:
    """A tool that delegates to ``agent`` (for another agent's ``tools``)."""
    definition = definition_of(agent, name, description)
    tool = subagent_tool(None, [], tool_name=name, description=description, fixed=definition)
    _AGENT_TOOLS[id(tool)] = agent
    return tool
