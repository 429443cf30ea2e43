"""dsh: an agent harness whose history is an append-only, durable event log.

The names a library user needs are importable from here; each is loaded on first use, so
``import dsh`` stays cheap (the store backends, for one, pull in psycopg and sqlite3)::

    import dsh

    @dsh.tool
    async def lookup(city: str) -> str:
        \"\"\"Look up the forecast for a city.\"\"\"
        return f"{city}: sunny"

    agent = dsh.Agent(model="mock-echo", tools=[lookup], store="./sessions")
    result = agent.run_sync("hello", session_id="s1")

Everything else lives in the subpackages (``dsh.session``, ``dsh.runtime``, ``dsh.agent``,
``dsh.llm``, ``dsh.tools``, ``dsh.persistence``); modules whose names start with ``_`` are
private.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh._agent_api import Agent as Agent
    from dsh._agent_api import RunResult as RunResult
    from dsh._tool_decorator import FunctionTool as FunctionTool
    from dsh._tool_decorator import tool as tool
    from dsh.errors import RunError as RunError
    from dsh.errors import UsageError as UsageError
    from dsh.persistence.base import SessionLocked as SessionLocked
    from dsh.persistence.base import SessionNotFound as SessionNotFound
    from dsh.persistence.base import SessionStore as SessionStore
    from dsh.persistence.base import StoreError as StoreError
    from dsh.persistence.jsonl import JsonlStore as JsonlStore
    from dsh.persistence.postgres import PostgresStore as PostgresStore
    from dsh.persistence.sqlite import SqliteStore as SqliteStore
    from dsh.session import Event as Event
    from dsh.session import Session as Session
    from dsh.tools.types import Tool as Tool
    from dsh.tools.types import ToolCall as ToolCall
    from dsh.tools.types import ToolError as ToolError
    from dsh.tools.types import ToolResult as ToolResult
    from dsh.tools.types import define_tool as define_tool

__version__ = "0.1.0"

# name -> the module that defines it (imported on first access).
_EXPORTS = {
    "Agent": "dsh._agent_api",
    "RunResult": "dsh._agent_api",
    "tool": "dsh._tool_decorator",
    "FunctionTool": "dsh._tool_decorator",
    "RunError": "dsh.errors",
    "UsageError": "dsh.errors",
    "Tool": "dsh.tools.types",
    "ToolCall": "dsh.tools.types",
    "ToolError": "dsh.tools.types",
    "ToolResult": "dsh.tools.types",
    "define_tool": "dsh.tools.types",
    "Session": "dsh.session",
    "Event": "dsh.session",
    "SessionStore": "dsh.persistence.base",
    "StoreError": "dsh.persistence.base",
    "SessionLocked": "dsh.persistence.base",
    "SessionNotFound": "dsh.persistence.base",
    "JsonlStore": "dsh.persistence.jsonl",
    "SqliteStore": "dsh.persistence.sqlite",
    "PostgresStore": "dsh.persistence.postgres",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dsh' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
