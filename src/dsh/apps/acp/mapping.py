"""Session events to ACP ``session/update`` payloads, turn-end reasons to stop reasons, and ACP
prompt content to dsh content.

Everything here is a pure function of durable data, so a live turn and a ``session/load`` replay
of the same log produce the same updates. What maps to what:

- ``user/message`` (prompts, replay only: live prompts are the client's own) and
  ``steering/message`` → ``user_message_chunk``;
- ``assistant/chunk`` ``text-delta`` → ``agent_message_chunk``, ``reasoning-delta`` →
  ``agent_thought_chunk``;
- ``tool/call`` → ``tool_call`` (``in_progress``, a kind, a title, the raw input; ``edit``/``write``
  carry a diff, ``bash`` the command); ``tool/result`` → ``tool_call_update`` (``completed`` or
  ``failed``, the output as text);
- ``todo/write`` → ``plan``;
- time-context readings (``context/message`` from the time-context plugin) and every other
  log-only event map to nothing: the readings stay durable and model-visible but are not chat.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import TypeAlias

from acp import schema
from acp.exceptions import RequestError

from dsh.session.vocab import TextBlock, text_block

__all__ = ["PromptBlock", "Update", "invalid_params", "prompt_content", "stop_reason", "tool_kind", "updates_for"]

PromptBlock: TypeAlias = (
    schema.TextContentBlock
    | schema.ImageContentBlock
    | schema.AudioContentBlock
    | schema.ResourceContentBlock
    | schema.EmbeddedResourceContentBlock
)
"""A ``session/prompt`` content block as the acp package parses it."""

Update: TypeAlias = (
    schema.UserMessageChunk
    | schema.AgentMessageChunk
    | schema.AgentThoughtChunk
    | schema.ToolCallStart
    | schema.ToolCallProgress
    | schema.AgentPlanUpdate
)

_KINDS: dict[str, schema.ToolKind] = {
    "bash": "execute",
    "job_output": "execute",
    "job_list": "execute",
    "job_kill": "execute",
    "read": "read",
    "write": "edit",
    "edit": "edit",
    "glob": "search",
    "grep": "search",
    "todo_write": "think",
}


def tool_kind(name: str) -> schema.ToolKind:
    """The ACP kind of a dsh tool (``other`` for echo, MCP tools and unknown names)."""
    return _KINDS.get(name, "other")


def _args(raw: object) -> object:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _str(args: object, key: str) -> str | None:
    value = args.get(key) if isinstance(args, Mapping) else None
    return value if isinstance(value, str) else None


def _abs(path: str, cwd: str | None) -> str:
    # ACP diffs name absolute paths; the workspace tools resolve relative ones against the cwd.
    return path if os.path.isabs(path) or not cwd else os.path.normpath(os.path.join(cwd, path))


def tool_title(name: str, args: object) -> str:
    if name == "bash":
        return _str(args, "description") or _str(args, "command") or "bash"
    path = _str(args, "file_path")
    if name in ("read", "write", "edit") and path:
        return f"{name} {path}"
    pattern = _str(args, "pattern")
    if name in ("glob", "grep") and pattern:
        return f"{name} {pattern}"
    if name == "todo_write":
        return "update plan"
    return name


def _text_content(text: str) -> schema.ContentToolCallContent:
    return schema.ContentToolCallContent(type="content", content=schema.TextContentBlock(type="text", text=text))


def tool_call_content(
    name: str, args: object, cwd: str | None
) -> list[schema.ContentToolCallContent | schema.FileEditToolCallContent | schema.TerminalToolCallContent]:
    """What a tool call shows before it runs: a diff for ``write``/``edit``, the command for ``bash``."""
    path = _str(args, "file_path")
    if name == "write" and path is not None:
        return [schema.FileEditToolCallContent(type="diff", path=_abs(path, cwd), new_text=_str(args, "content") or "")]
    if name == "edit" and path is not None:
        return [
            schema.FileEditToolCallContent(
                type="diff",
                path=_abs(path, cwd),
                old_text=_str(args, "old_string") or "",
                new_text=_str(args, "new_string") or "",
            )
        ]
    command = _str(args, "command")
    if name == "bash" and command is not None:
        return [_text_content(f"$ {command}")]
    return []


def _items(value: object) -> list[object]:
    """A JSON array's items (``[]`` for anything else)."""
    return list(value) if isinstance(value, list) else []


def _result_text(data: Mapping[str, object]) -> str:
    parts = []
    for block in _items(data.get("content")):
        if isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def _message_texts(content: object) -> list[str]:
    return [
        str(b.get("text", ""))
        for b in _items(content)
        if isinstance(b, Mapping) and b.get("type") == "text" and b.get("text")
    ]


_PLAN_STATUS: dict[str, schema.PlanEntryStatus] = {
    "pending": "pending",
    "in_progress": "in_progress",
    "completed": "completed",
}


def updates_for(
    event_type: str,
    data: Mapping[str, object],
    *,
    cwd: str | None,
    tool_names: dict[str, str],
    replay: bool,
) -> list[Update]:
    """The ``session/update`` payloads of one event (often none).

    ``tool_names`` maps call ids to tool names, filled from ``tool/call`` events, so a
    ``tool/result`` can carry its tool's kind. ``replay`` includes the user's own prompts, which a
    live client already shows.
    """
    if event_type == "assistant/chunk":
        chunk = data.get("chunk")
        if not isinstance(chunk, Mapping):
            return []
        kind, text = chunk.get("type"), chunk.get("text")
        if not isinstance(text, str) or not text:
            return []
        if kind == "text-delta":
            return [schema.AgentMessageChunk(session_update="agent_message_chunk", content=_text_block(text))]
        if kind == "reasoning-delta":
            return [schema.AgentThoughtChunk(session_update="agent_thought_chunk", content=_text_block(text))]
        return []
    if event_type == "tool/call":
        call_id, name = str(data.get("callId") or ""), str(data.get("name") or "")
        tool_names[call_id] = name
        args = _args(data.get("arguments"))
        return [
            schema.ToolCallStart(
                session_update="tool_call",
                tool_call_id=call_id,
                title=tool_title(name, args),
                kind=tool_kind(name),
                status="in_progress",
                raw_input=args,
                content=tool_call_content(name, args, cwd) or None,
            )
        ]
    if event_type == "tool/result":
        call_id = str(data.get("callId") or "")
        name = tool_names.get(call_id, "")
        failed = bool(data.get("isError"))
        text = _result_text(data)
        return [
            schema.ToolCallProgress(
                session_update="tool_call_update",
                tool_call_id=call_id,
                status="failed" if failed else "completed",
                kind=tool_kind(name) if name else None,
                content=[_text_content(text)] if text else None,
                raw_output={"content": text, "isError": failed},
            )
        ]
    if event_type == "todo/write":
        entries = []
        for item in _items(data.get("todos")):
            if isinstance(item, Mapping):
                entries.append(
                    schema.PlanEntry(
                        content=str(item.get("content", "")),
                        priority="medium",
                        status=_PLAN_STATUS.get(str(item.get("status")), "pending"),
                    )
                )
        return [schema.AgentPlanUpdate(session_update="plan", entries=entries)]
    if event_type == "steering/message" or (replay and event_type == "user/message"):
        source = data.get("source")
        if isinstance(source, Mapping) and source.get("kind") not in (None, "user"):
            return []
        return [
            schema.UserMessageChunk(session_update="user_message_chunk", content=_text_block(text))
            for text in _message_texts(data.get("content"))
        ]
    return []


def invalid_params(message: str) -> RequestError:
    """A -32602 error whose message says what was wrong (the package's helper says only "Invalid params")."""
    return RequestError(-32602, message)


def _text_block(text: str) -> schema.TextContentBlock:
    return schema.TextContentBlock(type="text", text=text)


def stop_reason(reason: Mapping[str, object] | None, last_finish: str | None) -> schema.StopReason:
    """The ACP stop reason of a dsh ``turn/end`` reason; turn errors raise a protocol error.

    ``last_finish`` is the finish kind of the turn's last model step (``content-filter`` becomes
    ``refusal``).
    """
    kind = (reason or {}).get("kind")
    if kind == "completed":
        return "refusal" if last_finish == "content-filter" else "end_turn"
    if kind in ("aborted", "disposed", "interrupted"):
        return "cancelled"
    if kind == "max-tokens":
        return "max_tokens"
    if kind == "rejected":
        return "refusal"
    if kind == "error" and (reason or {}).get("code") == "MAX_STEPS":
        return "max_turn_requests"
    message = str((reason or {}).get("message") or "the turn failed")
    code = (reason or {}).get("code")
    raise RequestError(-32603, f"turn failed: {message}", {"reason": dict(reason or {}), "code": code})


def prompt_content(blocks: Sequence[PromptBlock]) -> list[TextBlock]:
    """ACP prompt blocks as dsh user content: text, embedded text resources and resource links.

    Images, audio and binary resources are refused (``initialize`` advertises no image or audio
    support), with a protocol error naming the block.
    """
    content: list[TextBlock] = []
    for index, block in enumerate(blocks):
        if isinstance(block, schema.TextContentBlock):
            content.append(text_block(block.text))
        elif isinstance(block, schema.EmbeddedResourceContentBlock):
            resource = block.resource
            if not isinstance(resource, schema.TextResourceContents):
                raise invalid_params(f"prompt block {index}: binary embedded resources are not supported; send text")
            content.append(text_block(f'<resource uri="{resource.uri}">\n{resource.text}\n</resource>'))
        elif isinstance(block, schema.ResourceContentBlock):
            content.append(text_block(f"[resource: {block.name}]({block.uri})"))
        else:
            kind = block.type
            raise invalid_params(
                f'prompt block {index}: content type "{kind}" is not supported by dsh (text, resource and resource_link are)'
            )
    if not content:
        raise invalid_params("the prompt is empty")
    return content
