"""``@dsh.tool``: a typed Python function as a tool, its JSON schema derived from the signature.

Owns the translation from a function to a :class:`dsh.tools.Tool`:

- the parameters' JSON schema comes from the type hints (msgspec's schema generator, so
  ``Literal``, ``Enum``, ``list[...]``, ``TypedDict``, dataclasses and msgspec Structs work);
  parameters without a default are required; extra keys are refused;
- the description is the docstring's first paragraph, and a Google-style ``Args:`` section
  describes the parameters (``Annotated[T, "text"]`` does too);
- the tool registry validates the model's arguments against that schema before every call (a
  mismatch is a model-visible ``INVALID_ARGUMENTS`` error and the function is not called); here
  the validated JSON values are converted to the declared types;
- a parameter annotated :class:`dsh.tools.ToolCall` receives the call (its ``signal``, ``agent``)
  and is not part of the schema;
- a returned ``str`` becomes one text block; a list of content blocks, a ``ToolResult`` or
  ``None`` pass through as ``define_tool`` documents. A plain function runs in a worker thread,
  so a blocking tool does not stall the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, ParamSpec, TypeVar, overload

import msgspec

from dsh.tools.types import Tool, ToolCall, ToolError, ToolOutput

__all__ = ["FunctionTool", "tool"]

P = ParamSpec("P")
R = TypeVar("R")

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}[A-Za-z_][A-Za-z0-9_]*)\s*(\([^)]*\))?\s*:\s*(.*)$")


@dataclass(frozen=True)
class FunctionTool(Tool):
    """A :class:`Tool` made from a function by ``@dsh.tool``; calling it calls the function."""

    function: Callable[..., object] = field(default=lambda: None, repr=False, compare=False)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.function(*args, **kwargs)


@dataclass(frozen=True)
class _Param:
    name: str
    annotation: object
    required: bool


def _split_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph, and ``{param: description}`` from an ``Args:`` section."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_HEADER.match(line):
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    for i, line in enumerate(lines):
        if not _ARGS_HEADER.match(line):
            continue
        base: int | None = None
        current: str | None = None
        for entry in lines[i + 1 :]:
            if not entry.strip():
                continue
            indent = len(entry) - len(entry.lstrip())
            if indent == 0:
                break  # the next section ("Returns:", ...)
            base = indent if base is None else base
            match = _ARG_LINE.match(entry)
            if indent == base and match:
                current = match.group(1).lstrip("*")
                params[current] = match.group(3).strip()
            elif current is not None:
                params[current] = f"{params[current]} {entry.strip()}".strip()
        break
    return " ".join(summary), params


def _is_call_param(annotation: object) -> bool:
    """``ToolCall``, ``ToolCall | None`` or an ``Annotated`` form of either."""
    if annotation is ToolCall:
        return True
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _is_call_param(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return ToolCall in typing.get_args(annotation)
    return False


def _annotated_description(annotation: object) -> str | None:
    if typing.get_origin(annotation) is Annotated:
        for meta in typing.get_args(annotation)[1:]:
            if isinstance(meta, str):
                return meta
    return None


def _build_schema(
    fn: Callable[..., object], tool_name: str, param_docs: Mapping[str, str]
) -> tuple[dict[str, object], list[_Param], str | None]:
    """The parameters schema, the model-visible parameters, and the ToolCall parameter name."""
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise TypeError(f'@dsh.tool "{tool_name}": cannot resolve type hints: {exc}') from exc
    params: list[_Param] = []
    call_param: str | None = None
    for p in signature.parameters.values():
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(f'@dsh.tool "{tool_name}": *args and **kwargs cannot be described to a model')
        if p.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(f'@dsh.tool "{tool_name}": parameter "{p.name}" is positional-only')
        annotation = hints.get(p.name, inspect.Parameter.empty)
        if annotation is inspect.Parameter.empty:
            raise TypeError(f'@dsh.tool "{tool_name}": parameter "{p.name}" has no type hint')
        if _is_call_param(annotation):
            call_param = p.name
            continue
        params.append(_Param(p.name, annotation, p.default is inspect.Parameter.empty))
    try:
        schemas, components = msgspec.json.schema_components(
            [p.annotation for p in params], ref_template="#/$defs/{name}"
        )
    except (TypeError, ValueError) as exc:
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise TypeError(f'@dsh.tool "{tool_name}": {last}') from exc
    properties: dict[str, object] = {}
    for param, param_schema in zip(params, schemas, strict=True):
        prop = dict(param_schema)
        description = _annotated_description(param.annotation) or param_docs.get(param.name)
        if description and "description" not in prop:
            prop["description"] = description
        default = signature.parameters[param.name].default
        if default is not inspect.Parameter.empty:
            # A default the model cannot see (not JSON) is still applied by Python.
            with contextlib.suppress(TypeError):
                prop["default"] = msgspec.to_builtins(default)
        properties[param.name] = prop
    schema: dict[str, object] = {"type": "object", "properties": properties}
    required = [p.name for p in params if p.required]
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    if components:
        schema["$defs"] = dict(components)
    return schema, params, call_param


def _make_tool(
    fn: Callable[..., object],
    *,
    name: str | None,
    description: str | None,
    needs_approval: bool,
) -> FunctionTool:
    if not callable(fn):
        raise TypeError("@dsh.tool decorates a function")
    tool_name = name or getattr(fn, "__name__", "")
    if not tool_name or tool_name == "<lambda>":
        raise TypeError("@dsh.tool: give the tool a name (name=...)")
    summary, param_docs = _split_docstring(inspect.getdoc(fn))
    parameters, params, call_param = _build_schema(fn, tool_name, param_docs)
    annotations = {p.name: p.annotation for p in params}
    is_async = inspect.iscoroutinefunction(fn)

    async def execute(args: object, call: ToolCall) -> ToolOutput:
        if args is None or args == "":
            args = {}
        # The registry validated ``args`` against the schema, whose "type" is "object".
        assert isinstance(args, Mapping)
        try:
            # JSON values to the declared types (Structs, dataclasses, enums, tuples ...).
            kwargs: dict[str, object] = {
                key: msgspec.convert(value, annotations[key], strict=False) for key, value in args.items()
            }
        except msgspec.ValidationError as exc:
            raise ToolError(f'invalid arguments for tool "{tool_name}": {exc}', code="INVALID_ARGUMENTS") from None
        if call_param is not None:
            kwargs[call_param] = call
        if is_async:
            result = fn(**kwargs)
            if inspect.isawaitable(result):
                result = await result
        else:
            result = await asyncio.to_thread(fn, **kwargs)
        return _output(result)

    return FunctionTool(
        name=tool_name,
        description=summary if description is None else description,
        parameters=parameters,
        execute=execute,
        needs_approval=needs_approval,
        function=fn,
    )


def _output(result: object) -> ToolOutput:
    if result is None or isinstance(result, (str, list)):
        return result
    from dsh.tools.types import ToolResult

    if isinstance(result, ToolResult):
        return result
    if isinstance(result, tuple):
        return list(result)
    # Other JSON values: their compact JSON as one text block.
    try:
        return msgspec.json.encode(result).decode()
    except TypeError:
        raise TypeError(f"tool returned {type(result).__name__}; return str, content blocks or JSON data") from None


@overload
def tool(fn: Callable[P, R], /) -> FunctionTool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, needs_approval: bool = False
) -> Callable[[Callable[P, R]], FunctionTool]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: bool = False,
) -> FunctionTool | Callable[[Callable[P, R]], FunctionTool]:
    """Make a function (plain or async) a tool: ``@dsh.tool`` or ``@dsh.tool(name=...)``.

    The name defaults to the function's name, the description to the docstring's first
    paragraph. See the module docstring for the schema and validation rules.
    """
    if fn is not None:
        return _make_tool(fn, name=name, description=description, needs_approval=needs_approval)

    def decorate(f: Callable[P, R]) -> FunctionTool:
        return _make_tool(f, name=name, description=description, needs_approval=needs_approval)

    return decorate
