"""Turn boundaries written outside the driver, the turn-end flush, and turn-ending errors.

Owns :func:`side_turn`, the one way to write a turn the driver does not run (``Agent.inject``
while idle, compaction's idle path), :func:`flush_turn`, the flush every turn end is followed
by, and :class:`TurnError` with :func:`reason_for`, the ``{kind: 'error'}`` reason of a failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from dsh.agent.hooks import AGENT_ERROR, AgentError
from dsh.agent.sessions import SESSIONS
from dsh.runtime import Context
from dsh.session import Session
from dsh.session.vocab import (
    ErrorReason,
    JsonObject,
    Source,
    TurnEndReason,
    error_reason,
    turn_end,
    turn_start,
)

if TYPE_CHECKING:
    from dsh.agent.agent import Agent

log = logging.getLogger("dsh.agent")


class TurnError(Exception):
    """A failure that ends a turn with ``{kind: 'error', step, message, code?}``."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


def error_code(exc: BaseException) -> str | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else None


def reason_for(step: int, exc: BaseException) -> ErrorReason:
    """The turn-end reason of a failure; a non-``Exception`` without a code gets ``UNKNOWN``."""
    code = error_code(exc)
    if code is None and not isinstance(exc, Exception):
        code = "UNKNOWN"
    return error_reason(step, str(exc) or type(exc).__name__, code)


def side_turn(session: Session, source: Source | JsonObject, body: Callable[[int], TurnEndReason]) -> int:
    """Write a one-shot turn now: ``turn/start`` (trigger ``injection``), whatever ``body(turn)``
    appends, and ``turn/end`` with the reason it returns; returns the turn number.

    Synchronous, so nothing can interleave; only call it when no turn is open. A ``body`` that
    raises still gets its turn closed (``error``) before the exception goes on.
    """
    turn = session.last_turn + 1
    session.append("turn/start", turn_start(turn, "injection", source))
    try:
        reason = body(turn)
    except Exception as exc:
        session.append("turn/end", turn_end(turn, reason_for(0, exc)))
        raise
    session.append("turn/end", turn_end(turn, reason))
    return turn


async def flush_turn(ctx: Context, agent: Agent, turn: int, step: int = 0) -> None:
    """Flush the agent's session after a turn end; a failure is logged and reported as
    ``agent/error``, never raised (the turn is already closed in memory)."""
    sessions = ctx.get(SESSIONS)
    if sessions is None:
        return
    try:
        await sessions.flush(agent.session)
    except Exception as exc:
        log.warning('agent "%s": session/flush failed at turn %s: %s', agent.id, turn, exc)
        ctx.emit(AGENT_ERROR, AgentError(agent, turn, step, exc))
