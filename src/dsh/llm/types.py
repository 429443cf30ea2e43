"""The LLM seam's vocabulary: content blocks, messages, stream chunks, usage, finish reasons.

This module owns the *shapes* that cross the LLM seam (docs/llm.md) and nothing else:

- content blocks and messages, re-exported from the durable vocabulary (:mod:`dsh.session.vocab`);
- stream chunks (``block-start``, ``text-delta``, ``reasoning-delta``, ``tool-call-delta``,
  ``block-end``, ``usage``, ``finish``), :class:`TokenUsage` and :data:`FinishReason`;
- :class:`LlmRequest`, what an adapter's ``stream(request)`` receives;
- :class:`LlmError`, the one exception type adapters and the service raise;
- :class:`Adapter` and :class:`AbortSignalLike`, the structural protocols the seam relies on.

Everything is plain data (``TypedDict`` over ``dict``) because chunks are logged verbatim as
``assistant/chunk`` events: key spellings, camelCase included, are durable and must match the
reference exactly. Key *order* matters too (the JSONL writer keeps insertion order), so producers
build chunk dicts in the order the fields are declared here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, Protocol, TypeAlias, TypedDict, runtime_checkable

from dsh.session.vocab import (
    ContentBlock,
    Message,
    ReasoningBlock,
    Role,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSchema,
)

__all__ = [
    "AbortSignalLike",
    "AbortedFinish",
    "Adapter",
    "BlockEndChunk",
    "BlockStartChunk",
    "BlockType",
    "ContentBlock",
    "ErrorFinish",
    "FinishChunk",
    "FinishReason",
    "LlmError",
    "LlmRequest",
    "MaxTokensFinish",
    "Message",
    "ReasoningBlock",
    "ReasoningDeltaChunk",
    "Role",
    "StopFinish",
    "StreamChunk",
    "TextBlock",
    "TextDeltaChunk",
    "TokenUsage",
    "ToolCallBlock",
    "ToolCallDeltaChunk",
    "ToolCallsFinish",
    "ToolResultBlock",
    "ToolSchema",
    "UsageChunk",
]

# --------------------------------------------------------------------------- content blocks
# The durable vocabulary (dsh.session.vocab) owns blocks and messages; re-exported here because
# they are also what crosses this seam.

BlockType: TypeAlias = Literal["text", "reasoning", "tool-call"]


# --------------------------------------------------------------------------- usage and finish


class TokenUsage(TypedDict):
    """Disjoint token counts: ``inputTokens`` excludes cache reads/writes."""

    inputTokens: int
    outputTokens: int
    cacheReadTokens: NotRequired[int]
    cacheWriteTokens: NotRequired[int]
    reasoningTokens: NotRequired[int]


class StopFinish(TypedDict):
    kind: Literal["stop"]


class ToolCallsFinish(TypedDict):
    kind: Literal["tool-calls"]


class MaxTokensFinish(TypedDict):
    kind: Literal["max-tokens"]


class AbortedFinish(TypedDict):
    kind: Literal["aborted"]


class ErrorFinish(TypedDict):
    kind: Literal["error"]
    message: str
    code: NotRequired[str]


FinishReason: TypeAlias = (
    StopFinish | ToolCallsFinish | MaxTokensFinish | AbortedFinish | ErrorFinish
)

# --------------------------------------------------------------------------- stream chunks


class BlockStartChunk(TypedDict):
    type: Literal["block-start"]
    index: int
    blockType: BlockType


class TextDeltaChunk(TypedDict):
    type: Literal["text-delta"]
    index: int
    text: str


class ReasoningDeltaChunk(TypedDict):
    type: Literal["reasoning-delta"]
    index: int
    text: str


class ToolCallDeltaChunk(TypedDict):
    type: Literal["tool-call-delta"]
    index: int
    id: str
    name: NotRequired[str]
    argumentsDelta: str


class BlockEndChunk(TypedDict):
    """Closes ``index``; ``block`` is the authoritative assembled block."""

    type: Literal["block-end"]
    index: int
    block: ContentBlock


class UsageChunk(TypedDict):
    type: Literal["usage"]
    usage: TokenUsage


class FinishChunk(TypedDict):
    """The terminal chunk; adapters emit nothing after it."""

    type: Literal["finish"]
    reason: FinishReason


StreamChunk: TypeAlias = (
    BlockStartChunk
    | TextDeltaChunk
    | ReasoningDeltaChunk
    | ToolCallDeltaChunk
    | BlockEndChunk
    | UsageChunk
    | FinishChunk
)

# --------------------------------------------------------------------------- protocols


@runtime_checkable
class AbortSignalLike(Protocol):
    """What the seam needs of ``dsh.runtime.AbortSignal``.

    ``aborted``, ``reason``, ``add_listener(cb) -> remove`` (``cb()`` runs synchronously at the
    abort, or right away if already aborted) and ``await wait()``.
    """

    @property
    def aborted(self) -> bool: ...

    @property
    def reason(self) -> object: ...

    def add_listener(self, callback: Callable[[], object], /) -> Callable[[], None]: ...

    def wait(self) -> Awaitable[object]: ...


@runtime_checkable
class Adapter(Protocol):
    """An LLM adapter: any object whose ``stream(request)`` returns an async iterator of chunks."""

    def stream(self, request: LlmRequest, /) -> AsyncIterator[StreamChunk]: ...


# --------------------------------------------------------------------------- request and error


@dataclass(frozen=True, slots=True)
class LlmRequest:
    """One model call (the reference's ``GenerateOptions``), frozen once built.

    ``messages`` holds message dicts in the reference shapes (``Session.derive_messages()``
    output can be passed as is); ``tools`` holds ``{name, description, parameters}`` dicts.
    """

    model: str
    messages: Sequence[Mapping[str, Any]] = ()
    system: str | None = None
    tools: Sequence[Mapping[str, Any]] = ()
    temperature: float | None = None
    max_tokens: int | None = None
    stop: Sequence[str] | None = None
    session_id: str | None = None
    signal: AbortSignalLike | None = None


class LlmError(Exception):
    """An LLM-seam failure with a machine-readable ``code`` and, for HTTP failures, ``status``.

    Codes used by dsh: ``NO_ADAPTER``, ``DUPLICATE_ADAPTER``, ``AUTH``, ``RATE_LIMIT``,
    ``INVALID_REQUEST``, ``SERVER``, ``HTTP_<status>``, ``TIMEOUT``, ``CONNECTION``,
    ``STREAM_CLOSED``, ``MALFORMED_RESPONSE``, ``ABORTED``.
    """

    code: str
    status: int | None
    message: str

    def __init__(self, message: str, code: str = "UNKNOWN", status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status

    def __repr__(self) -> str:
        extra = f", status={self.status}" if self.status is not None else ""
        return f"LlmError({self.message!r}, code={self.code!r}{extra})"
