"""Tool declarations, the ``ctx.tools`` registry and its never-raising execute pipeline."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import dsh.tools.registry as tools_plugin
from dsh.runtime import AbortController, ConfigError, Context
from dsh.tools import ToolCall, ToolError, ToolRegistry, ToolResult, define_tool


def text_tool(name: str, reply: str = "ok") -> Any:
    return define_tool(
        name=name,
        description=f"{name} tool",
        execute=lambda args, call: [{"type": "text", "text": reply}],
    )


async def mounted() -> Context:
    ctx = Context()
    await ctx.plugin(tools_plugin)
    return ctx


def test_define_tool_defaults_to_empty_object_schema() -> None:
    a = text_tool("a")
    b = text_tool("b")
    assert a.parameters == {"type": "object", "properties": {}}
    assert a.parameters is not b.parameters
    assert a.schema() == {
        "name": "a",
        "description": "a tool",
        "parameters": {"type": "object", "properties": {}},
    }
    with pytest.raises(ValueError):
        define_tool(name="", description="", execute=lambda a, c: [])


async def test_plugin_provides_tools_service_and_dispose_removes_it() -> None:
    ctx = Context()
    fiber = await ctx.plugin(tools_plugin)
    assert isinstance(ctx.tools, ToolRegistry)
    await fiber.dispose()
    assert not ctx.has("tools")


async def test_register_duplicate_and_unregister() -> None:
    ctx = await mounted()
    tool = text_tool("t")
    unregister = ctx.tools.register(tool)
    with pytest.raises(ValueError, match='tool "t" is already registered'):
        ctx.tools.register(text_tool("t"))
    assert "t" in ctx.tools and len(ctx.tools) == 1
    unregister()
    assert "t" not in ctx.tools
    again = ctx.tools.register(text_tool("t"))
    unregister()  # stale remover must not remove the newer registration
    assert "t" in ctx.tools
    again()
    assert ctx.tools.names() == []


@given(st.lists(st.text(min_size=1, max_size=8), unique=True, max_size=10))
def test_schemas_sorted_by_name(names: list[str]) -> None:
    reg = ToolRegistry()
    for n in names:
        reg.register(text_tool(n))
    assert [s["name"] for s in reg.schemas()] == sorted(names)


async def test_tool_order_from_config_and_argument() -> None:
    ctx = Context()
    await ctx.plugin(tools_plugin, {"toolOrder": ["zeta", "missing", "alpha"]})
    for n in ("alpha", "beta", "zeta", "gamma"):
        ctx.tools.register(text_tool(n))
    assert [s["name"] for s in ctx.tools.schemas()] == ["zeta", "alpha", "beta", "gamma"]
    assert [s["name"] for s in ctx.tools.schemas(["gamma"])] == ["gamma", "alpha", "beta", "zeta"]
    with pytest.raises(ConfigError, match=r"^\$\.toolOrder: expected array \| null, got str$"):
        await Context().plugin(tools_plugin, {"toolOrder": "zeta"})


async def test_schemas_are_copies() -> None:
    reg = ToolRegistry()
    reg.register(
        define_tool(
            name="p",
            description="d",
            parameters={"type": "object", "properties": {"x": {"type": "string"}}},
            execute=lambda a, c: [],
        )
    )
    reg.schemas()[0]["parameters"]["properties"].clear()
    assert reg.schemas()[0]["parameters"]["properties"] == {"x": {"type": "string"}}


async def test_unknown_tool() -> None:
    ctx = await mounted()
    result = await ctx.tools.execute(call_id="c1", name="nope", arguments={})
    assert result == ToolResult(
        content=[{"type": "text", "text": 'Error: unknown tool "nope"'}],
        is_error=True,
        error={"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"},
    )


async def test_call_object_and_async_execute() -> None:
    ctx = await mounted()
    seen: list[tuple[Any, ToolCall]] = []

    async def execute(args: Any, call: ToolCall) -> list[dict[str, Any]]:
        await asyncio.sleep(0)
        seen.append((args, call))
        return [{"type": "text", "text": "done"}]

    ctx.tools.register(define_tool(name="t", description="d", execute=execute))
    agent = object()
    controller = AbortController()
    result = await ctx.tools.execute(
        call_id="call-7", name="t", arguments={"a": 1}, agent=agent, signal=controller.signal
    )
    assert result == ToolResult(content=[{"type": "text", "text": "done"}])
    args, call = seen[0]
    assert args == {"a": 1}
    assert (call.call_id, call.name, call.agent, call.signal) == (
        "call-7",
        "t",
        agent,
        controller.signal,
    )
    # Without a signal the tool still gets a (never-aborted) one.
    await ctx.tools.execute(call_id="c", name="t", arguments={})
    assert seen[1][0] == {} and seen[1][1].signal.aborted is False


async def test_raising_body_becomes_error_result() -> None:
    ctx = await mounted()

    def plain(args: Any, call: ToolCall) -> Any:
        raise ValueError("disk on fire")

    class CodedError(Exception):
        code = "E_FIRE"

    async def coded(args: Any, call: ToolCall) -> Any:
        raise CodedError("coded failure")

    def empty(args: Any, call: ToolCall) -> Any:
        raise RuntimeError()

    for name, fn in (("plain", plain), ("coded", coded), ("empty", empty)):
        ctx.tools.register(define_tool(name=name, description="", execute=fn))
    r = await ctx.tools.execute(call_id="1", name="plain", arguments={})
    assert r == ToolResult(content=[{"type": "text", "text": "Error: disk on fire"}], is_error=True)
    r = await ctx.tools.execute(call_id="2", name="coded", arguments={})
    assert r.content == [{"type": "text", "text": "Error: coded failure"}]
    assert r.is_error and r.error == {"name": "CodedError", "code": "E_FIRE"}
    r = await ctx.tools.execute(call_id="3", name="empty", arguments={})
    assert r.content == [{"type": "text", "text": "Error: RuntimeError"}] and r.error is None


async def test_tool_error_with_code() -> None:
    reg = ToolRegistry()

    def denied(args: Any, call: ToolCall) -> Any:
        raise ToolError("denied by policy", code="DENIED")

    reg.register(define_tool(name="d", description="", execute=denied))
    r = await reg.execute(call_id="1", name="d", arguments={})
    assert r.content == [{"type": "text", "text": "Error: denied by policy"}]
    assert r.error == {"name": "ToolError", "code": "DENIED"}


async def test_cancellation_propagates() -> None:
    reg = ToolRegistry()
    started = asyncio.Event()

    async def hang(args: Any, call: ToolCall) -> Any:
        started.set()
        await asyncio.sleep(3600)  # a tool that hangs (scripted) until cancelled

    reg.register(define_tool(name="hang", description="", execute=hang))
    task = asyncio.create_task(reg.execute(call_id="1", name="hang", arguments={}))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_result_shapes_are_normalized() -> None:
    reg = ToolRegistry()
    full = ToolResult(
        content=[{"type": "text", "text": "x"}],
        is_error=False,
        meta={"bytes": 1},
        additional_contexts=[{"text": "ctx"}],
    )
    outputs: dict[str, Any] = {
        "full": full,
        "none": None,
        "str": "plain",
        "bad": 42,
        "badlist": ["x"],
    }
    for name, value in outputs.items():
        reg.register(define_tool(name=name, description="", execute=lambda a, c, v=value: v))
    assert await reg.execute(call_id="1", name="full", arguments={}) is full
    assert (await reg.execute(call_id="1", name="none", arguments={})).content == []
    assert (await reg.execute(call_id="1", name="str", arguments={})).content == [
        {"type": "text", "text": "plain"}
    ]
    bad = await reg.execute(call_id="1", name="bad", arguments={})
    assert bad.is_error and "expected a list of content blocks" in bad.content[0]["text"]
    assert (await reg.execute(call_id="1", name="badlist", arguments={})).is_error


async def test_register_rejects_non_tools() -> None:
    with pytest.raises(TypeError):
        ToolRegistry().register({"name": "x"})  # type: ignore[arg-type]


ADD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "a": {"type": "integer"},
        "b": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["a", "b"],
}


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"a": 1}, '$: missing required property "b"'),
        ({}, '$: missing required properties "a", "b"'),
        ({"a": "1", "b": 2}, "$.a: expected integer, got string"),
        ({"a": 1, "b": 2, "tags": ["x", 3]}, "$.tags[1]: expected string, got integer"),
        ([1, 2], "$: expected object, got array"),
        (
            "{'a': 1",
            "not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
        ),
    ],
)
async def test_arguments_are_validated_against_the_schema_before_the_tool_runs(
    arguments: Any, problem: str
) -> None:
    calls: list[Any] = []

    def add(args: Any, call: ToolCall) -> str:
        calls.append(args)
        return str(args["a"] + args["b"])

    reg = ToolRegistry()
    reg.register(define_tool(name="add", description="d", parameters=ADD_SCHEMA, execute=add))
    result = await reg.execute(call_id="1", name="add", arguments=arguments)
    assert result == ToolResult(
        content=[{"type": "text", "text": f'Error: invalid arguments for tool "add": {problem}'}],
        is_error=True,
        error={"name": "InvalidToolArguments", "code": "INVALID_ARGUMENTS"},
    )
    assert calls == []  # the tool never saw them
    ok = await reg.execute(call_id="2", name="add", arguments={"a": 1, "b": 2})
    assert ok == ToolResult(content=[{"type": "text", "text": "3"}])


async def test_validator_follows_a_reregistered_tool_and_an_invalid_schema_is_not_enforced() -> (
    None
):
    reg = ToolRegistry()
    remove = reg.register(
        define_tool(name="t", description="d", parameters=ADD_SCHEMA, execute=lambda a, c: "ran")
    )
    assert (await reg.execute(call_id="1", name="t", arguments={})).is_error
    remove()
    loose = {"type": "object", "properties": {}}
    reg.register(
        define_tool(name="t", description="d", parameters=loose, execute=lambda a, c: "ran")
    )
    assert (await reg.execute(call_id="2", name="t", arguments={})).content == [
        {"type": "text", "text": "ran"}
    ]
    broken = {"type": "object", "properties": {"a": {"type": "no-such-type"}}}
    reg.register(
        define_tool(name="b", description="d", parameters=broken, execute=lambda a, c: "ran")
    )
    assert (await reg.execute(call_id="3", name="b", arguments={"a": 1})).content == [
        {"type": "text", "text": "ran"}
    ]


async def test_a_tool_registered_for_one_agent_is_seen_and_run_by_that_agent_only() -> None:
    reg = ToolRegistry()
    reg.register(text_tool("shared"))
    remove_a = reg.register(text_tool("mcp__docs__search", "from a"), agent_id="a")
    reg.register(text_tool("mcp__docs__search", "from b"), agent_id="b")  # the same name, another agent
    reg.register(text_tool("only_b"), agent_id="b")

    assert [s["name"] for s in reg.schemas()] == ["shared"]
    assert [s["name"] for s in reg.schemas(agent_id="a")] == ["mcp__docs__search", "shared"]
    assert [s["name"] for s in reg.schemas(agent_id="b")] == ["mcp__docs__search", "only_b", "shared"]
    assert [s["name"] for s in reg.schemas(["shared"], agent_id="a")] == ["shared", "mcp__docs__search"]
    assert reg.names(agent_id="c") == ["shared"] and "only_b" not in reg and len(reg) == 1

    ran_a = await reg.execute(call_id="1", name="mcp__docs__search", arguments={}, agent_id="a")
    ran_b = await reg.execute(call_id="2", name="mcp__docs__search", arguments={}, agent_id="b")
    assert (ran_a.content, ran_b.content) == ([{"type": "text", "text": "from a"}], [{"type": "text", "text": "from b"}])
    for agent_id in ("a", None):
        refused = await reg.execute(call_id="3", name="only_b", arguments={}, agent_id=agent_id)
        assert refused.is_error and refused.error == {"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"}

    # One name means one tool to an agent: an agent's own tool cannot shadow a shared one, and a
    # shared tool cannot take a name some agent owns.
    with pytest.raises(ValueError, match='tool "shared" is already registered'):
        reg.register(text_tool("shared"), agent_id="a")
    with pytest.raises(ValueError, match='tool "only_b" is already registered'):
        reg.register(text_tool("only_b"))
    remove_a()
    assert reg.names(agent_id="a") == ["shared"]
    assert reg.get("mcp__docs__search", agent_id="b") is not None


async def test_each_agents_tool_is_checked_against_its_own_schema() -> None:
    reg = ToolRegistry()
    strict = define_tool(name="t", description="d", parameters=ADD_SCHEMA, execute=lambda a, c: "strict ran")
    loose = define_tool(name="t", description="d", execute=lambda a, c: "loose ran")
    reg.register(strict, agent_id="a")
    reg.register(loose, agent_id="b")
    for _ in range(2):  # the second round reads the cached validators
        assert (await reg.execute(call_id="1", name="t", arguments={}, agent_id="a")).is_error
        ran = await reg.execute(call_id="2", name="t", arguments={}, agent_id="b")
        assert ran.content == [{"type": "text", "text": "loose ran"}]
