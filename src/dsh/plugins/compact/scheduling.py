"""When a manual compaction runs (``compact_now``), and the requests waiting for a pre-step.

Owns the placement rule: inside the open turn when called from the agent's own loop task or when
a turn is open on an agent that is not running; at the next pre-step while the agent runs; in a
one-shot turn of its own when it is idle. A request handed to a running agent waits in
:class:`StepRequests` until its next pre-step serves it, the agent goes idle (then the caller
retries), or the caller gives up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Literal

from dsh.agent.agent import Agent
from dsh.plugins.compact.result import CompactionError, CompactResult
from dsh.runtime import AbortSignal

__all__ = ["RETRY", "Placement", "Retry", "StepRequests", "error_text", "placement"]

log = logging.getLogger("dsh.compact")

Placement = Literal["in-turn", "idle", "next-step"]


class Retry:
    """The agent's state changed under a manual compaction: decide its placement again."""


RETRY: Final = Retry()


def error_text(exc: BaseException) -> str:
    """How a failure reads in ``compact/end {error}`` and in the log."""
    if isinstance(exc, asyncio.CancelledError):
        return "compaction cancelled"
    return str(exc) or type(exc).__name__


def placement(agent: Agent, signal: AbortSignal | None) -> Placement:
    """Where ``compact_now`` compacts now, or the error that says why it cannot."""
    if signal is not None and signal.aborted:
        raise CompactionError(f"compaction aborted: {signal.reason}")
    status = agent.status
    if status == "disposed":
        raise CompactionError(f'agent "{agent.id}" is disposed')
    driver = agent.driver
    in_loop = driver is not None and asyncio.current_task() is driver
    running = status == "running" or bool(agent.queued)
    if agent.session.open_turn is not None and (in_loop or not running):
        return "in-turn"
    if in_loop:
        # Waiting for the next step from inside the loop would wait forever.
        raise CompactionError("compact_now: the agent loop has no open turn to compact in")
    return "next-step" if running else "idle"


@dataclass
class _Request:
    """A manual compaction handed to the agent's next pre-step."""

    future: asyncio.Future[CompactResult | None]
    signal: AbortSignal | None
    taken: bool = False


Run = Callable[[AbortSignal | None], Awaitable[CompactResult | None]]


class StepRequests:
    """Manual compactions waiting for their agent's next pre-step."""

    def __init__(self) -> None:
        self._pending: dict[Agent, list[_Request]] = {}

    def __len__(self) -> int:
        """How many agents have requests waiting."""
        return len(self._pending)

    async def wait(self, agent: Agent, signal: AbortSignal | None) -> CompactResult | Retry | None:
        """Queue a request and wait until a pre-step serves it; :data:`RETRY` when the agent
        went idle first."""
        loop = asyncio.get_running_loop()
        request = _Request(loop.create_future(), signal)
        # A caller that gave up must not leave an unretrieved exception behind.
        request.future.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        self._pending.setdefault(agent, []).append(request)
        waiters: list[asyncio.Future[CompactResult | None] | asyncio.Task[None]] = [request.future]
        waiters.append(loop.create_task(agent.when_idle()))
        if signal is not None:
            waiters.append(loop.create_task(signal.wait()))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters[1:]:
                waiter.cancel()
            if not request.taken and not request.future.done():
                self._withdraw(agent, request)
        if request.future.cancelled():
            return RETRY
        return await request.future

    def _withdraw(self, agent: Agent, request: _Request) -> None:
        """Take back a request no pre-step has picked up (the agent went idle, or the caller
        gave up)."""
        pending = self._pending.get(agent)
        if pending is not None and request in pending:
            pending.remove(request)
            if not pending:
                del self._pending[agent]
        if not request.future.done():
            request.future.cancel()

    async def serve(self, agent: Agent, step_signal: AbortSignal | None, run: Run) -> None:
        """At a pre-step: run one compaction for every request queued for ``agent``, under the
        step's signal and each request's."""
        requests = self._pending.pop(agent, None)
        if not requests:
            return
        for request in requests:
            request.taken = True
        signals = [s for s in (step_signal, *(r.signal for r in requests)) if s is not None]
        signal = AbortSignal.any(signals) if len(signals) > 1 else (signals[0] if signals else None)
        try:
            result = await run(signal)
        except Exception as exc:
            log.info("manual compaction failed: %s", error_text(exc))
            for request in requests:
                if not request.future.done():
                    request.future.set_exception(exc)
        else:
            for request in requests:
                if not request.future.done():
                    request.future.set_result(result)
