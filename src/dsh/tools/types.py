"""Tool shapes: ``Tool``, ``ToolCall``, ``ToolResult``, ``ToolError`` and ``define_tool``.

This module owns the data a tool is declared with and the objects that cross the tool-execution
boundary. Model-visible spellings (``name``, ``description``, ``parameters`` as a JSON Schema
object) follow the reference; the Python side uses snake_case attributes.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from dsh.runtime.abort import AbortSignal
from dsh.session.vocab import ContentBlock, ToolErrorInfo, ToolSchema

__all__ = [
    "ContentBlock",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolExecute",
    "ToolResult",
    "define_tool",
]



@dataclass(frozen=True)
class ToolCall:
    """What a tool's ``execute(args, call)`` learns about the call it is serving."""

    call_id: str
    name: str
    agent: Any
    signal: AbortSignal
    # The arguments as given to the registry, after they passed the tool's schema.
    arguments: Any = None


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call, as the agent loop logs it in ``tool/result``."""

    content: list[ContentBlock]
    is_error: bool = False
    # ``{"name": ..., "code": ...}`` for harness-coded errors only.
    error: ToolErrorInfo | None = None
    meta: dict[str, Any] | None = None
    # Extra context the loop injects (as ``context/message``) after all tool results of a step.
    additional_contexts: list[Any] | None = None


ToolOutput: TypeAlias = "list[ContentBlock] | ToolResult | str | None"
ToolExecute: TypeAlias = Callable[[Any, ToolCall], "Awaitable[ToolOutput] | ToolOutput"]


class ToolError(Exception):
    """An error a tool raises on purpose. With ``code`` set, the result carries
    ``error: {"name": <class name>, "code": code}`` besides the ``Error: <message>`` text."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Tool:
    """A tool declaration plus its implementation."""

    name: str
    description: str
    parameters: dict[str, Any]
    execute: ToolExecute = field(repr=False)
    # True for tools whose every call must pass the approval policy (e.g. an untrusted MCP
    # server's tools); the workspace tools decide per call and leave this False.
    needs_approval: bool = False
    # False for tools that check their own arguments because their error results are a contract
    # (the schedule tools answer with the reference's coded JSON errors, not the registry's text).
    validate_arguments: bool = True
    # True for tools that never change files (an MCP tool annotated readOnlyHint): the rewind
    # plugin takes no workspace snapshot before a step that calls only such tools.
    read_only: bool = False
    # True for tools whose calls may overlap: consecutive such calls of one assistant message
    # run concurrently and their results still commit in the model's order (``subagent``).
    concurrency_safe: bool = False

    def schema(self) -> ToolSchema:
        """The model-facing declaration ``{name, description, parameters}`` (a fresh copy, so
        a caller mutating a request cannot corrupt the registered tool)."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": copy.deepcopy(self.parameters),
        }


def define_tool(
    *,
    name: str,
    description: str,
    parameters: Mapping[str, Any] | None = None,
    execute: ToolExecute,
    needs_approval: bool = False,
    validate_arguments: bool = True,
    read_only: bool = False,
    concurrency_safe: bool = False,
) -> Tool:
    """Declare a tool. ``parameters`` defaults to an empty object schema
    ``{"type": "object", "properties": {}}``; ``execute(args, call)`` may be plain or async and
    returns a list of content blocks or a :class:`ToolResult`."""
    if not isinstance(name, str) or not name:
        raise ValueError("define_tool: name must be a non-empty string")
    if not isinstance(description, str):
        raise TypeError("define_tool: description must be a string")
    if not callable(execute):
        raise TypeError("define_tool: execute must be callable")
    params: dict[str, Any] = (
        {"type": "object", "properties": {}}
        if parameters is None
        else copy.deepcopy(dict(parameters))
    )
    return Tool(
        name=name,
        description=description,
        parameters=params,
        execute=execute,
        needs_approval=needs_approval,
        validate_arguments=validate_arguments,
        read_only=read_only,
        concurrency_safe=concurrency_safe,
    )
