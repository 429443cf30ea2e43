"""``dsh sessions requests`` rebuilds, from the log alone, exactly what the model received."""

from __future__ import annotations

import asyncio

from dsh.apps.sessions import rebuild_requests
from dsh.plugins import time_context
from dsh.testing import Reply
from dsh.tools import echo
from tests.support.rig import Rigs


async def test_every_rebuilt_request_equals_the_one_the_adapter_received(rigs: Rigs) -> None:
    rig = await rigs.make(
        Reply(text="calling", tool_calls=[("c1", "echo", {"text": "a"}), ("c2", "echo", {"text": "b"})]),
        Reply(text="done"),
        Reply(text="again", tool_calls=[("c3", "echo", {"text": "c"})]),
        Reply(text="finished"),
        models=("m",),
        plugins=[echo, (time_context, {"timeZone": "UTC"})],
    )
    adapter = rig.model
    rig.ctx.system_prompt.add_section("deployment:persona", "Be brief.", order=0)
    agent = rig.agent(cwd="/w")
    for text in ("first", "second"):
        agent.send([{"type": "text", "text": text}])
        await asyncio.sleep(0)
        await agent.when_idle()
    rebuilt = rebuild_requests(list(agent.session.events))
    assert [(r["turn"], r["step"]) for r in rebuilt] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert len(adapter.requests) == 4
    for request, received in zip(rebuilt, adapter.requests, strict=True):
        assert request["messages"] == list(received.messages)
        assert request["system"] == received.system
        assert request["tools"] == list(received.tools)
        assert request["model"] == received.model
