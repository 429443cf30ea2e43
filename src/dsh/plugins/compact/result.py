"""What one compaction records (:class:`CompactResult`), its source, and how it fails."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dsh.session.vocab import JsonObject, TextBlock

__all__ = ["SOURCE", "CompactResult", "CompactionError"]

SOURCE: Final[JsonObject] = {"kind": "plugin", "plugin": "compact"}
"""The source of the checkpoint message and of an idle compaction's one-shot turn."""


class CompactionError(RuntimeError):
    """A compaction that could not run or did not succeed."""


@dataclass(frozen=True)
class CompactResult:
    """What one compaction did."""

    turn: int
    start: int
    end: int
    shadowed_seqs: tuple[int, ...]
    shadowed_token_count: int
    summary: list[TextBlock]
    model: str
    start_seq: int
    summary_seq: int
    checkpoint_seq: int
    end_seq: int
