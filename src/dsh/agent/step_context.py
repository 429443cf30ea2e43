"""What one step works from: :class:`StepContext`, :class:`StepSettings` and
:class:`StepOutcome`, shared by the step (:mod:`dsh.agent.step`) and tool execution
(:mod:`dsh.agent.tool_exec`) instead of threading the same parameters through both."""

from __future__ import annotations

from dataclasses import dataclass

from dsh.agent.agent import Agent, RunState
from dsh.llm.types import ToolSchema
from dsh.runtime import AbortController, AbortSignal
from dsh.session import DerivedMessages, Event
from dsh.session.vocab import JsonObject


@dataclass(slots=True)
class StepContext:
    """Everything one step works from, built by the turn before ``step/start`` is final."""

    agent: Agent
    state: RunState
    turn: int
    step: int
    system: str
    tools: list[ToolSchema]
    boundary: DerivedMessages
    step_start: Event
    controller: AbortController

    @property
    def signal(self) -> AbortSignal:
        return self.controller.signal


@dataclass(frozen=True, slots=True)
class StepOutcome:
    had_tool_calls: bool
    finish: JsonObject


@dataclass(frozen=True, slots=True)
class StepSettings:
    dev_checks: bool
    checkpoint_before_model: bool
    checkpoint_before_tools: bool
    tool_abort_grace: float
