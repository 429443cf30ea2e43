"""A recording ACP client and a helper that runs the real ``dsh acp`` behind the package's own
client connection (``acp.spawn_agent_process``) over the child's stdio."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from acp import schema
from acp.client.connection import ClientSideConnection
from acp.stdio import spawn_agent_process

from tests.apps.conftest import dsh_env

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


class Recorder:
    """The client side: records every update and answers permission requests from a script.

    ``answers`` holds option ids (``allow-once``, ``allow-always``, ``reject``), ``"cancelled"``, or
    ``"hang"`` (never answer); an empty script answers ``cancelled``.
    """

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.answers: list[str] = []
        self.asked: list[schema.RequestPermissionRequest] = []
        self.changed = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self.changed.set()

    async def request_permission(
        self, session_id: str, tool_call: schema.ToolCallUpdate, options: list[schema.PermissionOption], **kwargs: Any
    ) -> schema.RequestPermissionResponse:
        self.asked.append(schema.RequestPermissionRequest(session_id=session_id, tool_call=tool_call, options=options))
        self.changed.set()
        answer = self.answers.pop(0) if self.answers else "cancelled"
        if answer == "hang":
            await asyncio.Event().wait()
        if answer == "cancelled":
            return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))
        return schema.RequestPermissionResponse(outcome=schema.AllowedOutcome(outcome="selected", option_id=answer))

    def kinds(self) -> list[str]:
        return [u.session_update for _, u in self.updates]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u.content.text for _, u in self.updates if u.session_update == kind)

    def clear(self) -> None:
        self.updates.clear()

    async def wait_for(self, predicate: Any, timeout: float = 60) -> None:
        async def loop() -> None:
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(loop(), timeout)


@asynccontextmanager
async def dsh_acp(
    cwd: Path, *args: str, recorder: Recorder | None = None, **env: str
) -> AsyncIterator[tuple[ClientSideConnection, asyncio.subprocess.Process, Recorder, Path]]:
    """``dsh acp ARGS`` in ``cwd``; stderr goes to ``cwd/acp-stderr-N.log`` (returned)."""
    client = recorder or Recorder()
    n = 0
    while (cwd / f"acp-stderr-{n}.log").exists():
        n += 1
    log = cwd / f"acp-stderr-{n}.log"
    with log.open("wb") as err:
        async with spawn_agent_process(
            client,
            sys.executable,
            "-m",
            "dsh",
            "acp",
            *args,
            env=dsh_env(**NO_PROXY, **env),
            cwd=cwd,
            transport_kwargs={"stderr": err.fileno(), "limit": 50 * 1024 * 1024},
            use_unstable_protocol=True,
        ) as (conn, proc):
            yield conn, proc, client, log


async def initialize(conn: ClientSideConnection) -> schema.InitializeResponse:
    return await asyncio.wait_for(conn.initialize(protocol_version=1), 60)


def stderr_of(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def kill9(proc: asyncio.subprocess.Process) -> None:
    os.kill(proc.pid, 9)
