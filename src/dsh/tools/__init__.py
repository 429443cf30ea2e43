"""dsh.tools: tool declarations, the ``TOOLS`` registry and the built-in ``echo`` tool.

``types`` owns the shapes (``define_tool``, ``Tool``, ``ToolCall``, ``ToolResult``,
``ToolError``); ``registry`` the ``tools`` plugin and its execute pipeline; ``echo`` the demo tool
and its ``echo-tool`` plugin. Load the registry with ``await ctx.plugin(dsh.tools.registry)``.
"""

from dsh.tools import echo, registry
from dsh.tools.echo import echo_tool
from dsh.tools.registry import ToolRegistry
from dsh.tools.types import (
    ContentBlock,
    Tool,
    ToolCall,
    ToolError,
    ToolExecute,
    ToolResult,
    define_tool,
)

__all__ = [
    "ContentBlock",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolExecute",
    "ToolRegistry",
    "ToolResult",
    "define_tool",
    "echo",
    "echo_tool",
    "registry",
]
