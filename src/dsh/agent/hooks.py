"""The bus events the agent package dispatches, declared once as typed hooks.

Each hook keeps its durable string name (YAML configs and the reference use it) and carries a
frozen payload whose fields are the listener arguments in dispatch order, so
``ctx.on(PRE_STEP, fn)`` gets ``fn(PreStep(...))`` while ``ctx.on("agent/pre-step", fn)`` still
gets ``fn(agent, turn, step, system_prompt, session_prefix, signal)``.

Listener order is the registration order; ``prepend=True`` jumps the queue. On ``agent/pre-step``
the order is decided by the plugins themselves: time-context registers with ``prepend=True`` so
its reading is appended before compaction (registered plainly) measures the history, whatever
order the two plugins were mounted in.

The ``session/*`` events are the live-session service's (:mod:`dsh.agent.sessions`); store
plugins listen to them to persist sessions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dsh.runtime.keys import Chain, Hook

if TYPE_CHECKING:
    from dsh.agent.agent import Agent
    from dsh.runtime.abort import AbortSignal
    from dsh.session import Event, Session

__all__ = [
    "AGENT_CREATED",
    "AGENT_DISPOSED",
    "AGENT_ERROR",
    "AGENT_QUEUED",
    "AGENT_STATUS",
    "PRE_STEP",
    "PROMPT_SUBMIT",
    "REQUEST",
    "SESSION_CHECKPOINT",
    "SESSION_CREATED",
    "SESSION_DISPOSED",
    "SESSION_EVENT",
    "SESSION_FLUSH",
    "SESSION_PREFIX",
    "SESSION_START",
    "STEP_RESULT",
    "TURN_CONTINUATION",
    "TURN_STOP",
]

JsonMap = Mapping[str, object]


@dataclass(frozen=True, slots=True)
class AgentOnly:
    agent: Agent


@dataclass(frozen=True, slots=True)
class AgentError:
    agent: Agent
    turn: int
    step: int
    error: BaseException


@dataclass(frozen=True, slots=True)
class AgentQueued:
    agent: Agent
    content: Sequence[JsonMap]
    meta: JsonMap  # {"source": ..., "steering": bool}


@dataclass(frozen=True, slots=True)
class AgentStatus:
    agent: Agent
    status: Literal["idle", "running", "disposed"]


@dataclass(frozen=True, slots=True)
class SessionStart:
    agent: Agent
    reason: Literal["startup", "resume"]


@dataclass(frozen=True, slots=True)
class PreStep:
    """Before each model step, after the turn's prompts are logged; listeners may append
    (time-context's reading, compaction)."""

    agent: Agent
    turn: int
    step: int
    system_prompt: str
    session_prefix: Sequence[JsonMap] | None
    signal: AbortSignal


@dataclass(frozen=True, slots=True)
class TurnStop:
    agent: Agent
    turn: int


@dataclass(frozen=True, slots=True)
class SessionPrefix:
    agent: Agent
    prefix: Sequence[JsonMap]
    signal: AbortSignal


@dataclass(frozen=True, slots=True)
class RequestConfig:
    agent: Agent
    turn: int
    step: int
    config: JsonMap


@dataclass(frozen=True, slots=True)
class TurnContinuation:
    agent: Agent
    turn: int
    default: str


@dataclass(frozen=True, slots=True)
class PromptSubmit:
    agent: Agent
    content: Sequence[JsonMap]
    source: JsonMap


@dataclass(frozen=True, slots=True)
class StepResult:
    agent: Agent
    turn: int
    step: int
    message: JsonMap


@dataclass(frozen=True, slots=True)
class SessionOnly:
    session: Session


@dataclass(frozen=True, slots=True)
class SessionEvent:
    session: Session
    event: Event


AGENT_CREATED: Hook[AgentOnly] = Hook("agent/created", AgentOnly)
AGENT_DISPOSED: Hook[AgentOnly] = Hook("agent/disposed", AgentOnly)
AGENT_ERROR: Hook[AgentError] = Hook("agent/error", AgentError)
AGENT_QUEUED: Hook[AgentQueued] = Hook("agent/queued", AgentQueued)
AGENT_STATUS: Hook[AgentStatus] = Hook("agent/status", AgentStatus)
SESSION_START: Hook[SessionStart] = Hook("agent/session-start", SessionStart)
PRE_STEP: Hook[PreStep] = Hook("agent/pre-step", PreStep)
TURN_STOP: Hook[TurnStop] = Hook("agent/turn-stop", TurnStop)
SESSION_PREFIX: Chain[SessionPrefix, Sequence[JsonMap]] = Chain("agent/session-prefix", SessionPrefix)
REQUEST: Chain[RequestConfig, JsonMap] = Chain("agent/request", RequestConfig)
TURN_CONTINUATION: Chain[TurnContinuation, object] = Chain("agent/turn-continuation", TurnContinuation)
PROMPT_SUBMIT: Chain[PromptSubmit, JsonMap] = Chain("agent/prompt-submit", PromptSubmit)
STEP_RESULT: Chain[StepResult, JsonMap] = Chain("agent/step-result", StepResult)

SESSION_CREATED: Hook[SessionOnly] = Hook("session/created", SessionOnly)
SESSION_EVENT: Hook[SessionEvent] = Hook("session/event", SessionEvent)
SESSION_FLUSH: Hook[SessionOnly] = Hook("session/flush", SessionOnly)
SESSION_CHECKPOINT: Hook[SessionOnly] = Hook("session/checkpoint", SessionOnly)
SESSION_DISPOSED: Hook[SessionOnly] = Hook("session/disposed", SessionOnly)


@dataclass(frozen=True, slots=True)
class PersistStopped:
    """The store refused to write ``session_id`` any more (another program wrote to it)."""

    session_id: str
    error: BaseException


# Emitted by the write coordinator; an app counts the run as failed.
SESSION_PERSIST_STOPPED: Hook[PersistStopped] = Hook("session/persist-stopped", PersistStopped)
