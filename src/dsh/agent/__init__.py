"""Agents: the registry, the agent surface and the loop that drives turns and steps."""

from dsh.agent.agent import Agent, AgentDisposedError, AgentOptions, AgentRegistry
from dsh.agent.loop import AgentLoop, InvariantError, TurnError

__all__ = [
    "Agent",
    "AgentDisposedError",
    "AgentLoop",
    "AgentOptions",
    "AgentRegistry",
    "InvariantError",
    "TurnError",
]
