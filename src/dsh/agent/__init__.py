"""Agents: the registry, the agent surface and the loop that drives turns and steps."""

from dsh.agent.agent import Agent, AgentDisposedError, AgentOptions, AgentRegistry
from dsh.agent.invariant import InvariantError
from dsh.agent.loop import AgentLoop
from dsh.agent.turns import TurnError

__all__ = [
    "Agent",
    "AgentDisposedError",
    "AgentLoop",
    "AgentOptions",
    "AgentRegistry",
    "InvariantError",
    "TurnError",
]
