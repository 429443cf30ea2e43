"""Automatic compaction that keeps time (see README.md); the plugin entry is :mod:`.plugin`."""

from dsh._js import utf16_length
from dsh.plugins.compact.compactor import COMPACT, Compactor
from dsh.plugins.compact.config import BasicCompactConfig, Config
from dsh.plugins.compact.estimate import (
    CharsCounter,
    DeepSeekCounter,
    Estimator,
    TokenCounter,
    make_estimator,
)
from dsh.plugins.compact.plugin import apply, inject, name
from dsh.plugins.compact.result import SOURCE, CompactionError, CompactResult
from dsh.plugins.compact.select import CompactRange, covered_span, select_range, tool_cut_points
from dsh.plugins.compact.summariser import SUMMARIZER_SYSTEM_PROMPT
from dsh.plugins.compact.transcript import (
    CHECKPOINT_PREAMBLE,
    checkpoint_content,
    render_transcript,
    span_line,
    summarizer_prompt,
)

__all__ = [
    "CHECKPOINT_PREAMBLE",
    "COMPACT",
    "SOURCE",
    "SUMMARIZER_SYSTEM_PROMPT",
    "BasicCompactConfig",
    "CharsCounter",
    "CompactRange",
    "CompactResult",
    "CompactionError",
    "Compactor",
    "Config",
    "DeepSeekCounter",
    "Estimator",
    "TokenCounter",
    "apply",
    "checkpoint_content",
    "covered_span",
    "inject",
    "make_estimator",
    "name",
    "render_transcript",
    "select_range",
    "span_line",
    "summarizer_prompt",
    "tool_cut_points",
    "utf16_length",
]
