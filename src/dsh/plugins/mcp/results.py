"""MCP tool results as dsh tool results.

Blocks keep their order. Text stays text; a resource link becomes a text line naming it; images,
audio and embedded resources become an explicit one-line diagnostic (dsh has no attachments
yet, so their payload is not shown to the model). ``isError`` becomes an error result whose
first text block starts with ``Error: ``, as every other failing dsh tool reads. A result with
no content but ``structuredContent`` shows that JSON; one with neither says so.

A result whose text is larger than the server's ``maxResultBytes`` (30000 by default) is cut
as ``bash`` output is (:func:`cap_result`): the model gets its tail, the complete text goes to
a spill file, and a last line states the cap and names the file.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from pathlib import Path

import mcp_types as types

from dsh.tools.types import ContentBlock, ToolResult

__all__ = ["cap_result", "map_result", "result_bytes"]


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


def _texts(result: ToolResult) -> list[str]:
    return [t for b in result.content if isinstance(t := b.get("text"), str)]


def result_bytes(result: ToolResult) -> int:
    """The UTF-8 size of a result's text."""
    return sum(len(t.encode("utf-8", "surrogatepass")) for t in _texts(result))


def cap_result(result: ToolResult, max_bytes: int, spill: Callable[[str], Path]) -> ToolResult:
    """``result`` itself when its text fits ``max_bytes``; otherwise one text block with the
    tail that fits, then ``[result truncated to its last N bytes (of M); full result: PATH]``.
    ``spill(full_text)`` saves the complete text and returns where."""
    total = result_bytes(result)
    if total <= max_bytes:
        return result
    full = "".join(_texts(result))
    data = full.encode("utf-8", "surrogatepass")
    # A cut inside a UTF-8 sequence leaves a partial character: dropped, not replaced.
    tail = data[-max_bytes:].decode("utf-8", "ignore")
    try:
        where = f"full result: {spill(full)}"
    except OSError as exc:
        where = f"the full result could not be saved: {exc.strerror or exc}"
    marker = f"[result truncated to its last {max_bytes} bytes (of {total}); {where}]"
    if result.is_error and not tail.startswith("Error: "):
        tail = "Error: " + tail
    text = tail if tail.endswith("\n") else tail + "\n"
    content: list[ContentBlock] = [{"type": "text", "text": text + marker}]
    return ToolResult(content=content, is_error=result.is_error)
