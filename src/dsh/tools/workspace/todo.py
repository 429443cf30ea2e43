"""``todo_write``: the model's plan, as whole-list snapshots in the session log.

Each call appends a log-only ``todo/write`` ``{todos: [{content, status}]}`` event; the latest one
is the list (apps render it as a checklist). The result reads
``Updated todo list: P pending, I in progress, C completed.``
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from dsh.tools.types import Tool, ToolCall, ToolError, define_tool
from dsh.tools.workspace._common import text

__all__ = ["render_checklist", "todo_tool"]

STATUSES: Final = ("pending", "in_progress", "completed")

DESCRIPTION: Final = (
    "Record and update a structured task list for the current work. Send the ENTIRE list every "
    "call — it REPLACES the previous list (there are no partial updates, no per-item edits). Use "
    "it to plan multi-step work and show progress: add one todo per concrete step before you "
    "start. Mark every todo being actively worked on `in_progress` — several at once when work "
    "genuinely runs in parallel (e.g. concurrent subagents or background commands), one for "
    "sequential work; while work remains, at least one task should be `in_progress`. Mark a todo "
    "`completed` the moment it is done (do not batch completions), and allow no `in_progress` "
    "item only once all work is complete. Skip the list for trivial single-step tasks. Statuses: "
    "`pending` (not started), `in_progress` (being worked on now), `completed` (finished)."
)

PARAMETERS: Final = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": "The COMPLETE task list, replacing any previous list.",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "content": {"type": "string", "description": "What the task is — a short imperative line."},
                    "status": {
                        "type": "string",
                        "description": "pending (not started) | in_progress (now) | completed (done).",
                        "enum": list(STATUSES),
                    },
                },
                "required": ["content", "status"],
            },
        }
    },
    "required": ["todos"],
}

_BOXES: Final = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


def render_checklist(todos: Any) -> str:
    """The list as terminal lines (``[x] done``, ``[~] doing``, ``[ ] to do``)."""
    lines = []
    for item in todos if isinstance(todos, list) else ():
        if isinstance(item, Mapping):
            lines.append(f"{_BOXES.get(str(item.get('status')), '[?]')} {item.get('content', '')}")
    return "\n".join(lines)


def _validate(raw: Any) -> list[dict[str, str]]:
    items = raw.get("todos") if isinstance(raw, Mapping) else None
    if not isinstance(items, list):
        raise ToolError("invalid todos: expected an array of {content, status}")
    todos: list[dict[str, str]] = []
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, Mapping) or set(item) - {"content", "status"}:
            raise ToolError("invalid todo: each item is exactly {content, status}")
        content, status = item.get("content"), item.get("status")
        if not isinstance(content, str) or not content.strip():
            raise ToolError("invalid todo: `content` must be a non-empty string")
        if status not in STATUSES:
            raise ToolError(f"invalid todo: `status` must be one of {', '.join(STATUSES)}")
        content = content.strip()
        if content in seen:
            raise ToolError(f"invalid todos: duplicate content {content!r}")
        seen.add(content)
        todos.append({"content": content, "status": str(status)})
    return todos


def todo_tool() -> Tool:
    def execute(args: Any, call: ToolCall) -> list[Any]:
        todos = _validate(args)
        session = getattr(call.agent, "session", None)
        if session is None:
            raise ToolError("todo_write requires an owning agent session")
        session.append("todo/write", {"todos": todos})
        count = {s: sum(1 for t in todos if t["status"] == s) for s in STATUSES}
        return text(
            f"Updated todo list: {count['pending']} pending, {count['in_progress']} in progress, "
            f"{count['completed']} completed."
        )

    return define_tool(name="todo_write", description=DESCRIPTION, parameters=PARAMETERS, execute=execute)
