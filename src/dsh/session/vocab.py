"""The durable vocabulary: content blocks, messages and the payload of every core event type.

This module owns the *shapes* that the log stores and the model sees (docs/events.md). The LLM
seam (:mod:`dsh.llm.types`), the tool seam (:mod:`dsh.tools.types`) and the agent loop import
them from here rather than defining their own. Everything is a ``TypedDict`` over plain ``dict``:
events are written as built, so key spellings (camelCase included) and key *order* are durable,
and the constructors below build each payload in the reference's key order.

The constructors exist for the events written from more than one place (turn and step
boundaries, error tool results); an event written once is built where it is written.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypeAlias, TypedDict

__all__ = [
    "COMPLETED",
    "AbortedReason",
    "AssistantMessageData",
    "CompletedReason",
    "ContentBlock",
    "ContextMessageData",
    "DisposedReason",
    "ErrorReason",
    "JsonObject",
    "MaxTokensReason",
    "Message",
    "ReasoningBlock",
    "RejectedReason",
    "Role",
    "Source",
    "SteeringMessageData",
    "StepBoundary",
    "TextBlock",
    "ToolCallBlock",
    "ToolCallData",
    "ToolErrorInfo",
    "ToolResultBlock",
    "ToolResultData",
    "ToolSchema",
    "Trigger",
    "TurnEndData",
    "TurnEndReason",
    "TurnStartData",
    "UserMessageData",
    "error_reason",
    "step_boundary",
    "text_block",
    "tool_error_result",
    "turn_end",
    "turn_start",
]

JsonObject: TypeAlias = dict[str, object]
"""A JSON object whose keys the vocabulary leaves open (a source's extra fields, ``meta``)."""

# --------------------------------------------------------------------------- content blocks


class TextBlock(TypedDict):
    """``{type:'text', text}``."""

    type: Literal["text"]
    text: str


class ReasoningBlock(TypedDict):
    """``{type:'reasoning', text, signature?, redacted?}``: the model's thinking channel.

    ``signature`` is the provider's opaque proof of the thinking (Anthropic), kept byte for byte
    so the block can be sent back; ``redacted: true`` marks thinking the provider encrypted,
    whose data is the ``signature`` and whose ``text`` is empty.
    """

    type: Literal["reasoning"]
    text: str
    signature: NotRequired[str]
    redacted: NotRequired[bool]


class ToolCallBlock(TypedDict):
    """``{type:'tool-call', id, name, arguments}``; ``arguments`` is the raw JSON string."""

    type: Literal["tool-call"]
    id: str
    name: str
    arguments: str


class ToolResultBlock(TypedDict):
    """``{type:'tool-result', toolCallId, content, isError?}``."""

    type: Literal["tool-result"]
    toolCallId: str
    content: list[ContentBlock]
    isError: NotRequired[bool]


ContentBlock: TypeAlias = TextBlock | ReasoningBlock | ToolCallBlock | ToolResultBlock
Role: TypeAlias = Literal["system", "user", "assistant"]


class Message(TypedDict):
    """``{role, content}``; the model-visible history is a list of these."""

    role: Role
    content: list[ContentBlock]


class ToolSchema(TypedDict):
    """A tool as declared to the model: ``{name, description, parameters}`` (JSON Schema)."""

    name: str
    description: str
    parameters: JsonObject


def text_block(text: str) -> TextBlock:
    return {"type": "text", "text": text}


# --------------------------------------------------------------------------- turns and steps


class Source(TypedDict, total=False):
    """Who a message or a turn came from: ``{kind, ...}`` (``user``, ``schedule``, ...)."""

    kind: str


class Trigger(TypedDict):
    kind: Literal["message", "injection"]
    source: Source | JsonObject


class TurnStartData(TypedDict):
    turn: int
    trigger: Trigger


class CompletedReason(TypedDict):
    kind: Literal["completed"]


class MaxTokensReason(TypedDict):
    kind: Literal["max-tokens"]


class DisposedReason(TypedDict):
    kind: Literal["disposed"]


class AbortedReason(TypedDict):
    kind: Literal["aborted"]
    reason: str


class RejectedReason(TypedDict):
    kind: Literal["rejected"]
    reason: str


class ErrorReason(TypedDict):
    kind: Literal["error"]
    step: int
    message: str
    code: NotRequired[str]


TurnEndReason: TypeAlias = (
    CompletedReason | MaxTokensReason | DisposedReason | AbortedReason | RejectedReason | ErrorReason
)


class TurnEndData(TypedDict):
    turn: int
    reason: TurnEndReason | None


COMPLETED: CompletedReason = {"kind": "completed"}
"""Read-only: the session snapshots what it appends."""


class StepBoundary(TypedDict):
    """``step/start`` and ``step/end``."""

    turn: int
    step: int


def turn_start(turn: int, kind: Literal["message", "injection"], source: Source | JsonObject) -> TurnStartData:
    return {"turn": turn, "trigger": {"kind": kind, "source": source}}


def turn_end(turn: int, reason: TurnEndReason | None) -> TurnEndData:
    return {"turn": turn, "reason": reason}


def step_boundary(turn: int, step: int) -> StepBoundary:
    return {"turn": turn, "step": step}


def error_reason(step: int, message: str, code: str | None = None) -> ErrorReason:
    reason: ErrorReason = {"kind": "error", "step": step, "message": message}
    if code is not None:
        reason["code"] = code
    return reason


# --------------------------------------------------------------------------- messages


class UserMessageData(TypedDict):
    content: list[ContentBlock]
    source: Source | JsonObject


class ContextMessageData(TypedDict):
    content: list[ContentBlock]
    source: Source | JsonObject
    envelope: NotRequired[str]
    meta: NotRequired[object]


class SteeringMessageData(TypedDict):
    turn: int
    content: list[ContentBlock]
    source: Source | JsonObject


class AssistantMessageData(TypedDict):
    turn: int
    step: int
    content: list[ContentBlock]
    usage: NotRequired[JsonObject]


# --------------------------------------------------------------------------- tools


class ToolCallData(TypedDict):
    turn: int
    step: int
    callId: str
    name: str
    arguments: str


class ToolErrorInfo(TypedDict):
    """``{name, code}``: set for harness-coded tool errors only."""

    name: str
    code: str


class ToolResultData(TypedDict):
    turn: int
    step: int
    callId: str
    content: list[ContentBlock]
    isError: bool
    error: NotRequired[ToolErrorInfo]
    meta: NotRequired[object]


def tool_error_result(
    turn: int, step: int, call_id: str, text: str, error: ToolErrorInfo | None = None
) -> ToolResultData:
    """``tool/result`` data answering a call with an error text."""
    data: ToolResultData = {
        "turn": turn,
        "step": step,
        "callId": call_id,
        "content": [text_block(text)],
        "isError": True,
    }
    if error is not None:
        data["error"] = error
    return data
