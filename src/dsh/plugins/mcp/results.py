"""MCP tool results as dsh tool results.

Blocks keep their order. Text stays text; a resource link becomes a text line naming it; images,
audio and embedded resources become an explicit one-line diagnostic (dsh has no attachments
yet, so their payload is not shown to the model). ``isError`` becomes an error result whose
first text block starts with ``Error: ``, as every other failing dsh tool reads. A result with
no content but ``structuredContent`` shows that JSON; one with neither says so.
"""

from __future__ import annotations

import base64
import binascii
import json

import mcp_types as types

from dsh.tools.types import ContentBlock, ToolResult

__all__ = ["map_result"]


def _size(data: str) -> str:
    try:
        size = len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return "undecodable data"
    return f"{size} bytes"


def _block(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ResourceLink):
        label = f" ({block.name})" if block.name and block.name != str(block.uri) else ""
        desc = f": {block.description}" if block.description else ""
        return f"[resource link: {block.uri}{label}{desc}]"
    if isinstance(block, types.ImageContent):
        return f"[image: {block.mime_type}, {_size(block.data)}; not shown: dsh cannot attach images yet]"
    if isinstance(block, types.AudioContent):
        return f"[audio: {block.mime_type}, {_size(block.data)}; not shown: dsh cannot attach audio yet]"
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        mime = res.mime_type or "unknown type"
        return f"[embedded resource: {res.uri} ({mime}); not shown: dsh cannot attach resources yet]"
    kind = getattr(block, "type", type(block).__name__)
    return f"[unsupported MCP content type: {kind}]"


def map_result(raw_name: str, result: types.CallToolResult) -> ToolResult:
    """The dsh result of one ``tools/call``."""
    texts = [_block(b) for b in result.content]
    if not texts:
        if result.structured_content is not None:
            texts = [json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":"))]
        else:
            texts = [f"({raw_name} returned no content)"]
    if result.is_error:
        texts[0] = f"Error: {texts[0]}"
    content: list[ContentBlock] = [{"type": "text", "text": t} for t in texts]
    return ToolResult(content=content, is_error=bool(result.is_error))
