"""dsh.llm: the LLM seam (docs/llm.md).

- :mod:`dsh.llm.types`: blocks, messages, stream chunks, usage, finish reasons, ``LlmRequest``,
  ``LlmError``;
- :mod:`dsh.llm.assembler`: :class:`ChunkAssembler`, chunks → content blocks;
- :mod:`dsh.llm.service`: the ``llm`` plugin providing ``LLM`` (:class:`LlmService`);
- :mod:`dsh.llm.echo`: the keyless ``mock-echo`` model (plugin ``echo-llm``);
- :mod:`dsh.llm.openai_compat`: DeepSeek / OpenAI-compatible endpoints (plugin ``openai-llm``),
  with its config, request, stream and error mappings in ``openai_config``, ``openai_request``,
  ``openai_stream`` and ``openai_errors`` (README.md);
- :mod:`dsh.llm.anthropic_llm`: Anthropic's Messages API (plugin ``anthropic-llm``, the
  ``dsh[anthropic]`` extra), with ``anthropic_config``, ``anthropic_request``, ``anthropic_stream``
  and ``anthropic_errors``;
- :mod:`dsh.llm.providers` (``provider:model`` names) and :mod:`dsh.llm.catalog` (the model
  catalog, ``catalog.toml``).

None of the adapters is imported here, so that importing :mod:`dsh.llm` stays cheap.
"""

from dsh.llm.assembler import ChunkAssembler
from dsh.llm.service import LlmService
from dsh.llm.types import (
    AbortSignalLike,
    Adapter,
    BlockType,
    ContentBlock,
    FinishReason,
    LlmError,
    LlmRequest,
    Message,
    StreamChunk,
    TokenUsage,
    ToolSchema,
)

__all__ = [
    "AbortSignalLike",
    "Adapter",
    "BlockType",
    "ChunkAssembler",
    "ContentBlock",
    "FinishReason",
    "LlmError",
    "LlmRequest",
    "LlmService",
    "Message",
    "StreamChunk",
    "TokenUsage",
    "ToolSchema",
]
