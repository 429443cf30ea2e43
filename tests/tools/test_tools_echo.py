"""The built-in ``echo`` tool and its ``echo-tool`` plugin."""

from __future__ import annotations

import dsh.tools.echo as echo_plugin
import dsh.tools.registry as tools_plugin
from dsh.runtime import Context
from dsh.tools import ToolResult, echo_tool


def test_echo_declaration() -> None:
    assert echo_tool.schema() == {
        "name": "echo",
        "description": "Echo the given text back in upper case.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "Text to echo back."}},
            "required": ["text"],
        },
    }
    assert echo_plugin.name == "echo-tool" and echo_plugin.inject == ["tools"]


async def test_echo_plugin_waits_for_tools_then_echoes() -> None:
    ctx = Context()
    fiber = await ctx.plugin(echo_plugin)
    assert fiber.state == "pending"
    await ctx.plugin(tools_plugin)
    assert fiber.state == "active"
    assert [s["name"] for s in ctx.tools.schemas()] == ["echo"]
    result = await ctx.tools.execute(call_id="c", name="echo", arguments={"text": "hello world"})
    assert result == ToolResult(content=[{"type": "text", "text": "ECHO: HELLO WORLD"}])
    await fiber.dispose()
    assert ctx.tools.schemas() == []


async def test_echo_bad_arguments_are_an_error_result() -> None:
    ctx = Context()
    await ctx.plugin(tools_plugin)
    await ctx.plugin(echo_plugin)
    # The registry checks the schema before the tool runs (the echo tool's own check is the
    # fallback for callers that bypass the registry).
    cases: list[tuple[object, str]] = [
        ("not json", "not valid JSON (Expecting value: line 1 column 1 (char 0))"),
        ({}, '$: missing required property "text"'),
        ({"text": 3}, "$.text: expected string, got integer"),
    ]
    for args, problem in cases:
        result = await ctx.tools.execute(call_id="c", name="echo", arguments=args)
        assert result.is_error
        assert result.content == [
            {"type": "text", "text": f'Error: invalid arguments for tool "echo": {problem}'}
        ]
