"""The bus events the agent package dispatches, declared once as typed hooks.

Each hook keeps its durable string name (YAML configs and the reference use it) and carries a
frozen payload whose fields are the listener arguments in dispatch order, so
``ctx.on(PRE_STEP, fn)`` gets ``fn(PreStep(...))`` while ``ctx.on("agent/pre-step", fn)`` still
gets ``fn(agent, turn, step, system_prompt, session_prefix, signal)``.

Listener order is the registration order; ``prepend=True`` jumps the queue. On ``agent/pre-step``
the order is decided by the plugins themselves: time-context registers with ``prepend=True`` so
its reading is appended before compaction (registered plainly) measures the history, whatever
order the two plugins were mounted in.

The events an :class:`~dsh.agent.agent.Agent` dispatches itself (``agent/queued``, ``agent/status``,
``agent/disposed``, ``agent/error``) are declared in :mod:`dsh.agent.agent`, and the ``session/*``
events in :mod:`dsh.agent.sessions` (store plugins listen to them to persist sessions), so neither
module depends on this one; this module re-exports them: import every hook from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dsh.agent.agent import (
    AGENT_DISPOSED,
    AGENT_ERROR,
    AGENT_QUEUED,
    AGENT_STATUS,
    Agent,
    AgentError,
    AgentOnly,
    AgentQueued,
    AgentStatus,
)
from dsh.agent.sessions import (
    SESSION_CHECKPOINT,
    SESSION_CREATED,
    SESSION_DISPOSED,
    SESSION_EVENT,
    SESSION_FLUSH,
    SessionEvent,
    SessionOnly,
)
from dsh.runtime.keys import Chain, Hook

if TYPE_CHECKING:
    from dsh.runtime.abort import AbortSignal

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
    "TURN_END",
    "TURN_STOP",
    "AgentError",
    "AgentOnly",
    "AgentQueued",
    "AgentStatus",
    "SessionEvent",
    "SessionOnly",
]

JsonMap = Mapping[str, object]










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
class TurnEnd:
    """Just before ``turn/end`` is logged, whatever the reason; listeners may append (the
    rewind plugin's after-turn snapshot). ``step`` is the last step that ran (0: none)."""

    agent: Agent
    turn: int
    step: int
    reason: JsonMap


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






AGENT_CREATED: Hook[AgentOnly] = Hook("agent/created", AgentOnly)
SESSION_START: Hook[SessionStart] = Hook("agent/session-start", SessionStart)
PRE_STEP: Hook[PreStep] = Hook("agent/pre-step", PreStep)
TURN_STOP: Hook[TurnStop] = Hook("agent/turn-stop", TurnStop)
TURN_END: Hook[TurnEnd] = Hook("agent/turn-end", TurnEnd)
SESSION_PREFIX: Chain[SessionPrefix, Sequence[JsonMap]] = Chain("agent/session-prefix", SessionPrefix)
REQUEST: Chain[RequestConfig, JsonMap] = Chain("agent/request", RequestConfig)
TURN_CONTINUATION: Chain[TurnContinuation, object] = Chain("agent/turn-continuation", TurnContinuation)
PROMPT_SUBMIT: Chain[PromptSubmit, JsonMap] = Chain("agent/prompt-submit", PromptSubmit)
STEP_RESULT: Chain[StepResult, JsonMap] = Chain("agent/step-result", StepResult)

