"""The client asker fails closed: no answer in time, an error, or an unknown option refuses."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from acp import schema

from dsh.apps.acp.permissions import ClientAsker
from dsh.runtime import AbortController
from tests.support.wait import wait_until


class Client:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[schema.ToolCallUpdate] = []

    async def request_permission(self, session_id: str, tool_call: schema.ToolCallUpdate, options: Any, **_: Any) -> Any:
        self.asked.append(tool_call)
        if self.answer == "hang":
            await asyncio.Event().wait()
        if isinstance(self.answer, BaseException):
            raise self.answer
        return schema.RequestPermissionResponse(outcome=schema.AllowedOutcome(outcome="selected", option_id=self.answer))


def request(signal: Any = None) -> Any:
    return SimpleNamespace(
        agent=object(), tool_name="write", reason="outside the workspace",
        arguments={"file_path": "/etc/x", "content": "y"}, call_id="c1", signal=signal,
    )


async def ask(answer: Any, timeout: float = 5, signal: Any = None, client: Client | None = None) -> str:
    asker = ClientAsker(client or Client(answer), lambda agent: ("s1", "/w"), timeout=timeout)
    return await asker(request(signal))


async def test_answers_and_failures() -> None:
    assert await ask("allow-once") == "allowed-once"
    assert await ask("allow-always") == "allowed-session"
    assert await ask("reject") == "rejected"
    assert await ask("no-such-option") == "unavailable"
    assert await ask(ConnectionError("gone")) == "unavailable"
    assert await ask("hang", timeout=0.05) == "unavailable"


async def test_an_aborted_turn_cancels_the_open_question() -> None:
    controller = AbortController()
    client = Client("hang")
    pending = asyncio.ensure_future(ask("hang", signal=controller.signal, client=client))
    await wait_until(lambda: client.asked, what="the question to be open")
    controller.abort("cancelled by the client")
    assert await asyncio.wait_for(pending, 5) == "cancelled"
    done = AbortController()
    done.abort("earlier")
    assert await ask("allow-once", signal=done.signal) == "cancelled"


async def test_an_agent_of_no_acp_session_is_refused() -> None:
    asker = ClientAsker(Client("allow-once"), lambda agent: None, timeout=5)
    assert await asker(request()) == "unavailable"
