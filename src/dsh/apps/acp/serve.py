"""The ``dsh acp`` process around :class:`~dsh.apps.acp.server.DshAcpAgent`: stdout claimed for
the protocol, the connection on stdin/stdout, SIGTERM/SIGINT treated like end of input, and the
shutdown that ends running turns ``aborted`` and flushes every session."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import cast

from acp.agent.connection import AgentSideConnection
from acp.interfaces import Agent as AcpAgent

from dsh.apps.acp.server import AcpOptions, DshAcpAgent
from dsh.apps.acp.wire import StdioTransport, claim_stdout
from dsh.runtime import Context

__all__ = ["serve"]


async def serve(ctx: Context, options: AcpOptions) -> None:
    """Serve ACP on this process's stdin/stdout until the client closes stdin."""
    out = claim_stdout()
    transport = StdioTransport(out)
    agent = DshAcpAgent(ctx, options, transport)
    # use_unstable_protocol: session/resume and session/close are routed only then; the unstable
    # methods dsh does not implement (fork, ...) still answer "Method not found".
    conn = AgentSideConnection(cast(AcpAgent, agent), transport, listening=False, use_unstable_protocol=True)
    listening = asyncio.ensure_future(conn.listen())
    loop = asyncio.get_running_loop()
    handled = []
    # An editor stops its agent with SIGTERM (or SIGINT): leave like at end of input, so running
    # turns end "aborted" and every session is flushed, instead of leaving them to crash repair.
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, listening.cancel)
            handled.append(signum)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await listening
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
        for state in agent.sessions.values():
            if state.agent.status == "running":
                state.agent.cancel("dsh acp stopped (end of input or a signal)")
        await agent.close()
        await asyncio.shield(conn.close())
