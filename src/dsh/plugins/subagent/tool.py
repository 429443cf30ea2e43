"""The model-facing ``subagent`` tool: its schema, descriptions and result texts.

Owns every string the model sees from delegation (the reference's `tool-subagent` wording, plus
the optional ``subagent_type`` selector and the list of available agents), and the mapping of a
child's outcome to the tool result: success is the child's final text only; any other outcome is
``Error: <message>`` followed by the child's preserved partial text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from dsh.plugins.subagent.definitions import AgentDefinition

__all__ = ["DESCRIPTION", "failure_text", "parameters", "stop_reason_error", "tool_description"]

DESCRIPTION: Final = (
    "Delegate a self-contained task to a subagent (a separate agent that works in its own context) "
    "to offload focused, independent work — research, a scoped implementation, an analysis — so it "
    "does not consume this conversation's context. The subagent returns its result, not its "
    "intermediate steps. Give it a complete, standalone prompt: it does not see this conversation. "
    "This call waits for the result by default."
)
BACKGROUND_SENTENCE: Final = (
    " Set `run_in_background: true` to return a job id; collect with `job_output` and stop with `job_kill`."
)
DESCRIPTION_PARAM: Final = "A short (3-5 word) description of the delegated task, for display."
PROMPT_PARAM: Final = (
    "The complete, self-contained task for the subagent. It does not share this conversation's "
    "context, so include everything it needs."
)
BACKGROUND_PARAM: Final = (
    "Whether to run as a background job and return its id. Defaults to false; collect with "
    "job_output or stop with job_kill."
)
TYPE_PARAM: Final = "Which agent to delegate to (one of the names listed in this tool's description). Omit for a general-purpose subagent."
GENERAL_PURPOSE: Final = "general-purpose"
AGENTS_HEADING: Final = "Available agents for `subagent_type`:"


def tool_description(definitions: Sequence[AgentDefinition], *, background: bool) -> str:
    text = DESCRIPTION + (BACKGROUND_SENTENCE if background else "")
    if definitions:
        lines = [f"- {d.name}: {d.description}" if d.description else f"- {d.name}" for d in definitions]
        text += "\n\n" + AGENTS_HEADING + "\n" + "\n".join(lines)
    return text


def parameters(definitions: Sequence[AgentDefinition], *, background: bool) -> dict[str, Any]:
    props: dict[str, Any] = {
        "description": {"type": "string", "description": DESCRIPTION_PARAM},
        "prompt": {"type": "string", "description": PROMPT_PARAM},
    }
    if background:
        props["run_in_background"] = {"type": "boolean", "description": BACKGROUND_PARAM}
    if definitions:
        props["subagent_type"] = {
            "type": "string",
            "description": TYPE_PARAM,
            "enum": [GENERAL_PURPOSE, *(d.name for d in definitions if d.name != GENERAL_PURPOSE)],
        }
    return {"type": "object", "properties": props, "required": ["description", "prompt"]}


def stop_reason_error(kind: str) -> str | None:
    """The reference's headline for a child that did not complete (``None`` when it did)."""
    if kind == "completed":
        return None
    if kind in ("aborted", "disposed"):
        return "subagent run was cancelled"
    if kind == "error":
        return "subagent run failed"
    if kind == "max-tokens":
        return "subagent run hit its token limit before finishing"
    if kind == "rejected":
        return "subagent declined the task"
    return f"subagent run ended abnormally ({kind})"


def failure_text(message: str, partial: str) -> str:
    """``Error: <message>``, then the child's partial text (kept, never reported as success)."""
    return f"Error: {message}" + (f"\n\n{partial}" if partial else "")
