"""The bus event the LLM service dispatches: ``llm/stream``, a middleware chain around every
model call (``listener(StreamCall, next)``; ``await next()`` opens the rest of the chain, which
ends in the adapter)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dsh.runtime.keys import Chain

if TYPE_CHECKING:
    from dsh.llm.types import LlmRequest

__all__ = ["STREAM", "StreamCall"]


@dataclass(frozen=True, slots=True)
class StreamCall:
    request: LlmRequest


STREAM: Chain[StreamCall, object] = Chain("llm/stream", StreamCall)
