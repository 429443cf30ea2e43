"""System prompt sections and strict variables, through a real loop."""

from __future__ import annotations

import asyncio

from tests.support.rig import make_rig


async def test_sections_are_ordered_and_variables_substituted() -> None:
    rig = await make_rig(default="ok", models=("m",))
    ctx, adapter = rig.ctx, rig.model
    ctx.system_prompt.add_section("deployment:persona", "Model {{model}} in {{ cwd }}.", order=0)
    ctx.system_prompt.add_section("late", "", order=50)  # empty sections are dropped
    agent = rig.agent(cwd="/w")
    agent.send([{"type": "text", "text": "hi"}])
    await asyncio.sleep(0)
    await agent.when_idle()
    assert adapter.requests[0].system == (
        "You are an AI agent powered by the DeepSeek Harness SDK.\n\nModel m in /w."
    )
    await ctx.dispose()


async def test_an_unknown_variable_fails_the_turn_with_a_clear_error() -> None:
    rig = await make_rig(default="ok", models=("m",))
    ctx, adapter = rig.ctx, rig.model
    ctx.system_prompt.add_section("deployment:persona", "Hello {{user_name}}.", order=0)
    agent = rig.agent(cwd="/w")
    agent.send([{"type": "text", "text": "hi"}])
    await asyncio.sleep(0)
    await agent.when_idle()
    end = agent.session.events[-1]
    assert end.type == "turn/end" and end.data["reason"]["kind"] == "error"
    assert '"{{user_name}}"' in end.data["reason"]["message"]
    assert not adapter.requests  # no model call with a broken prompt
    await ctx.dispose()
