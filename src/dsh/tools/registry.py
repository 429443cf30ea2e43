"""The tool registry service (``TOOLS``) and the ``tools`` plugin that provides it.

This module owns registration, the model-facing schema list, and the execute pipeline the agent
loop calls for every tool call. A tool is seen by every agent, or registered for one agent id
alone (``register(tool, agent_id=...)``): then only that agent's requests list it
(``schemas(agent_id=...)``) and only its calls reach it (``execute(..., agent_id=...)``). The pipeline never raises into the loop: an unknown tool, a
raising body or a malformed return value all become an ``Error: ...`` result with
``is_error=True``. Only cancellation (``asyncio.CancelledError``) and process-level exits pass
through, since swallowing them would make a cancelled turn hang or an interrupt ignored.

Before a tool runs, its arguments are checked against its ``parameters`` JSON Schema (by the
``jsonschema`` package; one compiled validator per registered tool, built on first use). A
string that is not JSON, or arguments the schema rejects, never reach the tool: the model gets
``Error: invalid arguments for tool "<name>": <path>: <problem>`` (``$`` is the arguments
object, ``$.a[0]`` a nested value; ``expected integer, got string``, ``missing required property
"b"``) with ``error {name: "InvalidToolArguments", code: "INVALID_ARGUMENTS"}``. A tool whose
own schema is not a valid JSON Schema is run unchecked (logged once), so one sloppy declaration
does not disable the tool.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

import msgspec

from dsh.runtime.abort import AbortController, AbortSignal
from dsh.runtime.context import Context
from dsh.runtime.keys import ServiceKey
from dsh.session.vocab import ToolErrorInfo, ToolSchema
from dsh.tools.interception import PREAPPROVED, PostToolHook, PreToolHook, fold
from dsh.tools.types import ContentBlock, Tool, ToolCall, ToolResult

if TYPE_CHECKING:  # imported on the first tool call: it costs more than the rest of startup
    import jsonschema.exceptions
    import jsonschema.protocols

__all__ = ["ApprovalGate", "Config", "ToolRegistry", "apply", "inject", "name"]

_log = logging.getLogger("dsh.tools")

name = "tools"
inject: list[str] = []


class Config(msgspec.Struct, rename="camel"):
    """``toolOrder``: tool names listed first, in this order; the rest follow sorted by name."""

    tool_order: list[str] | None = None


class ApprovalGate(Protocol):
    """What the execute pipeline asks before running a tool that needs approval
    (the workspace-tools ``APPROVAL`` service is one)."""

    def requires(self, tool: Tool) -> bool: ...

    async def authorize(self, tool: Tool, call: ToolCall) -> str | None:
        """``None`` to run the call, else the model-visible refusal."""
        ...

    async def check(self, call: ToolCall, reason: str, *, tool_name: str | None = None) -> str | None:
        """Ask for ``call`` whatever the tool (a pre-tool hook said ``ask``)."""
        ...


class ToolRegistry:
    """Registered tools by name, their schemas, and the execute pipeline."""

    def __init__(self, *, tool_order: Sequence[str] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        # agent id -> that agent's own tools (dsh acp: the MCP servers one ACP session's client
        # passed), seen by no other agent.
        self._own: dict[str, dict[str, Tool]] = {}
        # (agent id or None, name) -> (the tool it was built for, its validator or None when the
        # schema is invalid)
        self._validators: dict[tuple[str | None, str], tuple[Tool, jsonschema.protocols.Validator | None]] = {}
        self.tool_order: list[str] | None = list(tool_order) if tool_order is not None else None
        self.approval_gate: ApprovalGate | None = None
        self._pre_hooks: list[PreToolHook] = []
        self._post_hooks: list[PostToolHook] = []

    def add_pre_tool_hook(self, hook: PreToolHook) -> Callable[[], None]:
        """Run ``hook`` before the approval gate of every call (see dsh.tools.interception)."""
        self._pre_hooks.append(hook)
        return lambda: self._pre_hooks.remove(hook) if hook in self._pre_hooks else None

    def add_post_tool_hook(self, hook: PostToolHook) -> Callable[[], None]:
        """Run ``hook`` after every call that ran without error; it may change the result."""
        self._post_hooks.append(hook)
        return lambda: self._post_hooks.remove(hook) if hook in self._post_hooks else None

    def set_approval_gate(self, gate: ApprovalGate) -> Callable[[], None]:
        """Install the approval gate every call passes; returns a function that removes it."""
        self.approval_gate = gate

        def remove() -> None:
            if self.approval_gate is gate:
                self.approval_gate = None

        return remove

    def register(self, tool: Tool, *, agent_id: str | None = None) -> Callable[[], None]:
        """Add ``tool``; returns a function that removes it. A duplicate name raises.

        With ``agent_id`` the tool belongs to that agent alone: only its requests list it and only
        its calls reach it. Its name must not be taken by a tool every agent sees, but two agents
        may each own a tool of the same name.
        """
        if not isinstance(tool, Tool):
            raise TypeError("register() expects a Tool (see dsh.tools.define_tool)")
        if agent_id is None:
            table = self._tools
            taken = tool.name in table or any(tool.name in own for own in self._own.values())
        else:
            table = self._own.setdefault(agent_id, {})
            taken = tool.name in table or tool.name in self._tools
        if taken:
            raise ValueError(f'tool "{tool.name}" is already registered')
        table[tool.name] = tool

        def unregister() -> None:
            # Only remove our own registration, never a later tool that reused the name.
            if table.get(tool.name) is tool:
                del table[tool.name]
                self._validators.pop((agent_id, tool.name), None)
                if agent_id is not None and not table and self._own.get(agent_id) is table:
                    del self._own[agent_id]

        return unregister

    def get(self, tool_name: str, *, agent_id: str | None = None) -> Tool | None:
        """The tool ``tool_name`` as agent ``agent_id`` sees it (None: tools every agent sees)."""
        return self._lookup(tool_name, agent_id)[0]

    def _lookup(self, tool_name: str, agent_id: str | None) -> tuple[Tool | None, str | None]:
        """The tool and its owner (``None`` for a tool every agent sees)."""
        tool = self._tools.get(tool_name)
        if tool is None and agent_id is not None:
            own = self._own.get(agent_id)
            if own is not None and tool_name in own:
                return own[tool_name], agent_id
        return tool, None

    def names(self, *, agent_id: str | None = None) -> list[str]:
        return sorted(self._visible(agent_id))

    def __contains__(self, tool_name: object) -> bool:
        return tool_name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def _visible(self, agent_id: str | None) -> Mapping[str, Tool]:
        own = self._own.get(agent_id) if agent_id is not None else None
        return {**self._tools, **own} if own else self._tools

    def schemas(
        self,
        tool_order: Sequence[str] | None = None,
        *,
        agent_id: str | None = None,
        allowed: Collection[str] | None = None,
    ) -> list[ToolSchema]:
        """``[{"name", "description", "parameters"}]`` of the tools agent ``agent_id`` sees (every
        agent's, plus its own; only the names in ``allowed`` when given, a delegated child's
        filter), sorted by name, unless a tool order (the argument, else the configured
        ``toolOrder``) lists some first."""
        tools = self._visible(agent_id)
        if allowed is not None:
            tools = {n: t for n, t in tools.items() if n in allowed}
        order = self.tool_order if tool_order is None else tool_order
        names = sorted(tools)
        if order:
            first = [n for n in dict.fromkeys(order) if n in tools]
            listed = set(first)
            names = first + [n for n in names if n not in listed]
        return [tools[n].schema() for n in names]

    async def execute(
        self,
        *,
        call_id: str,
        name: str,
        arguments: object,
        agent: Any = None,
        signal: AbortSignal | None = None,
        agent_id: str | None = None,
        allowed: Collection[str] | None = None,
    ) -> ToolResult:
        """Run tool ``name`` with ``arguments`` (parsed JSON, or the raw string when the model's
        JSON did not parse, which is refused) once they fit its schema. Always returns a
        :class:`ToolResult`. ``agent_id`` is the calling agent: another agent's own tool is
        unknown to it, and so is a tool outside ``allowed`` (a delegated child's filter)."""
        tool, owner = self._lookup(name, agent_id)
        if allowed is not None and name not in allowed:
            tool = None
        if tool is None:
            return ToolResult(
                content=[_text(f'Error: unknown tool "{name}"')],
                is_error=True,
                error={"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"},
            )
        invalid = self._check_arguments(tool, arguments, owner)
        if invalid is not None:
            return ToolResult(
                content=[_text(f'Error: invalid arguments for tool "{name}": {invalid}')],
                is_error=True,
                error={"name": "InvalidToolArguments", "code": "INVALID_ARGUMENTS"},
            )
        call = ToolCall(
            call_id=call_id,
            name=name,
            agent=agent,
            signal=signal if signal is not None else AbortController().signal,
            arguments=arguments,
        )
        hooked = fold([await hook(tool, call) for hook in list(self._pre_hooks)])
        if hooked.kind == "deny":
            return ToolResult(
                content=[_text(f"Error: {hooked.reason or 'blocked by PreToolUse hook'}")],
                is_error=True,
                error={"name": "HookDenied", "code": "HOOK_DENIED"},
                additional_contexts=list(hooked.contexts) or None,
            )
        if hooked.kind == "allow":
            refusal = None  # the hook's allow counts as an approval rule for this call
        elif hooked.kind == "ask":
            refusal = await self._hook_ask(tool, call, hooked.reason)
        else:
            refusal = await self._approval_refusal(tool, call)
        if refusal is not None:
            return ToolResult(
                content=[_text(f"Error: {refusal}")],
                is_error=True,
                error={"name": "ApprovalError", "code": "APPROVAL"},
            )
        token = PREAPPROVED.set(hooked.kind == "allow")
        try:
            output = tool.execute(arguments, call)
            if inspect.isawaitable(output):
                output = await output
            result = _normalize(name, output)
        except Exception as exc:
            # Exception, not BaseException: CancelledError/KeyboardInterrupt must propagate.
            _log.debug("tool %s failed", name, exc_info=True)
            return _error_result(exc)
        finally:
            PREAPPROVED.reset(token)
        if hooked.contexts:
            result = dataclasses.replace(
                result, additional_contexts=[*(result.additional_contexts or ()), *hooked.contexts]
            )
        if not result.is_error:
            for post in list(self._post_hooks):
                result = await post(tool, call, result)
        return result

    async def _hook_ask(self, tool: Tool, call: ToolCall, reason: str | None) -> str | None:
        """A pre-tool hook said ``ask``: ask whatever the tool; no gate refuses (fails closed)."""
        gate = self.approval_gate
        if gate is None:
            return f'approval unavailable: a PreToolUse hook asks to approve "{tool.name}" and no approval service is mounted; the call was not run'
        try:
            return await gate.check(call, reason or "a PreToolUse hook asks for approval", tool_name=tool.name)
        except Exception as exc:
            _log.debug("approval gate failed for %s", tool.name, exc_info=True)
            return f'approval unavailable: "{tool.name}" could not be approved ({exc}); the call was not run'

    async def _approval_refusal(self, tool: Tool, call: ToolCall) -> str | None:
        """Fail closed: a tool that needs approval with no gate mounted does not run."""
        gate = self.approval_gate
        if gate is None:
            if tool.needs_approval:
                return f'approval unavailable: "{tool.name}" requires approval and no approval service is mounted; the call was not run'
            return None
        if not gate.requires(tool):
            return None
        try:
            return await gate.authorize(tool, call)
        except Exception as exc:
            _log.debug("approval gate failed for %s", tool.name, exc_info=True)
            return f'approval unavailable: "{tool.name}" could not be approved ({exc}); the call was not run'

    def _validator(self, tool: Tool, owner: str | None) -> jsonschema.protocols.Validator | None:
        key = (owner, tool.name)
        cached = self._validators.get(key)
        if cached is not None and cached[0] is tool:
            return cached[1]
        import jsonschema
        import jsonschema.exceptions
        import jsonschema.validators

        schema = tool.parameters
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator: jsonschema.protocols.Validator | None
        try:
            cls.check_schema(schema)
            validator = cls(schema)
        except jsonschema.exceptions.SchemaError as exc:
            _log.warning(
                'tool "%s" declares an invalid parameter schema (%s); its arguments are not checked',
                tool.name,
                exc.message,
            )
            validator = None
        self._validators[key] = (tool, validator)
        return validator

    def _check_arguments(self, tool: Tool, arguments: Any, owner: str | None) -> str | None:
        """Why ``arguments`` do not fit ``tool``'s schema (one line), or None when they do."""
        if isinstance(arguments, str):
            # The loop passes the raw text when the model's JSON did not parse.
            try:
                json.loads(arguments)
            except ValueError as exc:
                return f"not valid JSON ({exc})"
            except RecursionError:
                return "not valid JSON (nested too deeply)"
        validator = self._validator(tool, owner) if tool.validate_arguments else None
        if validator is None:
            return None
        errors = sorted(
            validator.iter_errors(arguments),
            key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))),
        )
        if not errors:
            return None
        # One "required" failure per missing property describes them all: keep it once.
        problems = list(dict.fromkeys(_describe(e) for e in errors))
        shown = "; ".join(problems[:3])
        more = len(problems) - 3
        return shown + (f" (and {more} more)" if more > 0 else "")


_JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}


def _json_type(value: object) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _describe(error: jsonschema.exceptions.ValidationError) -> str:
    path = error.json_path
    if error.validator == "required":
        required = error.validator_value if isinstance(error.validator_value, list) else []
        have = error.instance if isinstance(error.instance, dict) else {}
        missing = [json.dumps(p) for p in required if p not in have]
        plural = "y" if len(missing) == 1 else "ies"
        return f"{path}: missing required propert{plural} {', '.join(missing)}"
    if error.validator == "type":
        expected = error.validator_value
        wanted = " or ".join(expected) if isinstance(expected, list) else str(expected)
        return f"{path}: expected {wanted}, got {_json_type(error.instance)}"
    # jsonschema quotes the offending value, which the model itself may have made huge.
    message = error.message if len(error.message) <= 200 else error.message[:200] + "…"
    return f"{path}: {message}"


def _text(text: str) -> ContentBlock:
    return {"type": "text", "text": text}


def _error_result(exc: BaseException) -> ToolResult:
    message = str(exc) or type(exc).__name__
    code = getattr(exc, "code", None)
    # error {name, code} marks harness-coded errors only (ones that carry a string code).
    error: ToolErrorInfo | None = {"name": type(exc).__name__, "code": code} if isinstance(code, str) else None
    return ToolResult(content=[_text(f"Error: {message}")], is_error=True, error=error)


def _blocks(tool_name: str, value: object) -> list[ContentBlock]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(b, Mapping) for b in value):
        raise TypeError(
            f'tool "{tool_name}" returned {type(value).__name__}; '
            "expected a list of content blocks or a ToolResult"
        )
    # Block shapes are the model's business; the log only needs JSON objects.
    return cast("list[ContentBlock]", [dict(b) for b in value])


def _normalize(tool_name: str, output: object) -> ToolResult:
    if isinstance(output, ToolResult):
        content = _blocks(tool_name, output.content)
        if isinstance(output.content, list) and all(type(b) is dict for b in output.content):
            return output  # already in canonical form: keep the tool's own object
        return dataclasses.replace(output, content=content)
    if output is None:
        return ToolResult(content=[])
    if isinstance(output, str):
        return ToolResult(content=[_text(output)])
    return ToolResult(content=_blocks(tool_name, output))


TOOLS: ServiceKey[ToolRegistry] = ServiceKey("tools")
"""The tool registry service (``ctx.require(TOOLS)``)."""


def apply(ctx: Context, config: Config) -> None:
    """Provide ``TOOLS``."""
    ctx.provide(TOOLS, ToolRegistry(tool_order=config.tool_order))
