"""The built-in ``echo`` tool, and the ``echo-tool`` plugin that registers it on ``TOOLS``.

It exists for demos and end-to-end tests: deterministic, keyless, and enough to exercise the
whole tool path (schema in the request, ``tool/call``, execute, ``tool/result``).
"""

from __future__ import annotations

from collections.abc import Mapping

from dsh.runtime.context import Context
from dsh.tools.registry import TOOLS
from dsh.tools.types import ContentBlock, ToolCall, ToolError, define_tool

__all__ = ["apply", "echo_tool", "inject", "name"]

name = "echo-tool"
inject = ["tools"]


def _execute(args: object, call: ToolCall) -> list[ContentBlock]:
    text = args.get("text") if isinstance(args, Mapping) else None
    if not isinstance(text, str):
        raise ToolError('echo: expected arguments {"text": <string>}')
    return [{"type": "text", "text": "ECHO: " + text.upper()}]


echo_tool = define_tool(
    name="echo",
    description="Echo the given text back in upper case.",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string", "description": "Text to echo back."}},
        "required": ["text"],
    },
    execute=_execute,
)


def apply(ctx: Context, config: object) -> None:
    """Register ``echo`` on ``TOOLS`` for as long as this plugin is loaded."""
    ctx.defer(ctx.require(TOOLS).register(echo_tool))
