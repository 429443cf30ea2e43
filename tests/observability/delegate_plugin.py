"""A test plugin: a ``delegate`` tool that runs a subagent on a child session (``parentSession``
= the caller's session) and returns its reply, as a subagent feature would."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from dsh.agent.loop import AGENT_LOOP
from dsh.runtime import Context
from dsh.tools.registry import TOOLS
from dsh.tools.types import ContentBlock, ToolCall, define_tool

name = "delegate-test"
inject = ["tools", "agent_loop"]


def apply(ctx: Context, config: object) -> None:
    counter = itertools.count(1)

    async def execute(args: object, call: ToolCall) -> list[ContentBlock]:
        prompt = str(args.get("prompt", "")) if isinstance(args, Mapping) else ""
        loop = ctx.require(AGENT_LOOP)
        parent = call.agent.session
        child = loop.create(f"sub{next(counter)}", model=call.agent.options.model, cwd=parent.header.get("cwd"),
                            parent_session=parent.id)
        child.send([{"type": "text", "text": prompt}])
        await child.when_idle()
        texts = [b.get("text", "") for e in child.session.events if e.type == "assistant/message"
                 for b in e.data.get("content", []) if b.get("type") == "text"]
        await loop.dispose_agent(child)
        return [{"type": "text", "text": texts[-1] if texts else ""}]

    tool = define_tool(
        name="delegate",
        description="Run a subagent on a prompt.",
        parameters={"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]},
        execute=execute,
    )
    ctx.defer(ctx.require(TOOLS).register(tool))
