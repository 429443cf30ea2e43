"""A recording ACP client, a helper that runs the real ``dsh acp`` behind the package's own
client connection (``acp.spawn_agent_process``) over the child's stdio, and the scripted model
replies (``call``, ``say``) the loopback OpenAI-compatible server answers with."""

from __future__ import annotations

import asyncio
import json
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
from tests.llm.sse_server import Reply, chunk
from tests.mcp.conftest import SERVER, alive
from tests.support.wait import wait_until

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


def text(t: str) -> schema.TextContentBlock:
    return schema.TextContentBlock(type="text", text=t)


def call(n: int, name: str, args: dict[str, Any], *, reasoning: str | None = None) -> Reply:
    """A model step that calls tool ``name`` (call id ``call_<n>``)."""
    payloads = [chunk(reasoning=reasoning)] if reasoning else []
    payloads += [
        chunk(
            tool_calls=[
                {"index": 0, "id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            ]
        ),
        chunk(finish="tool_calls"),
    ]
    return Reply.sse(payloads)


def say(words: str) -> Reply:
    """A model step that answers ``words``, streamed word by word."""
    pieces = [w + " " for w in words.split(" ")]
    pieces[-1] = pieces[-1].rstrip()
    return Reply.sse([chunk(content=p) for p in pieces] + [chunk(finish="stop")])


def mcp_server(name: str, tmp: Path) -> schema.McpServerStdio:
    """The MCP test server over stdio as a client passes it: replies as ``name`` and records its
    pid (and its guard's) in ``tmp/<name>.pids``."""
    env = {"MCP_TAG": name, "MCP_PIDFILE": str(tmp / f"{name}.pids")}
    return schema.McpServerStdio(
        name=name,
        command=sys.executable,
        args=[str(SERVER)],
        env=[schema.EnvVariable(name=k, value=v) for k, v in env.items()],
    )


@asynccontextmanager
async def dsh_acp(
    cwd: Path, *args: str, recorder: Recorder | None = None, shutdown_timeout: float = 2.0, **env: str
) -> AsyncIterator[tuple[ClientSideConnection, asyncio.subprocess.Process, Recorder, Path]]:
    """``dsh acp ARGS`` in ``cwd``; stderr goes to ``cwd/acp-stderr-N.log`` (returned). On exit
    stdin is closed and the process gets ``shutdown_timeout`` seconds before it is terminated."""
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
            transport_kwargs={"stderr": err.fileno(), "limit": 50 * 1024 * 1024, "shutdown_timeout": shutdown_timeout},
            use_unstable_protocol=True,
        ) as (conn, proc):
            yield conn, proc, client, log


async def initialize(conn: ClientSideConnection) -> schema.InitializeResponse:
    return await asyncio.wait_for(conn.initialize(protocol_version=1), 60)


def stderr_of(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def kill9(proc: asyncio.subprocess.Process) -> None:
    os.kill(proc.pid, 9)


async def gone(pid: int, timeout: float = 60) -> None:
    """Wait until process ``pid`` has ended (a server stopped by dsh is waited for by its guard)."""
    await wait_until(lambda: not alive(pid), timeout, f"process {pid} to end")
