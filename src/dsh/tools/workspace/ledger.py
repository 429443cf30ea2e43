"""The read ledger behind read-before-write: which files a session read, and as what."""

from __future__ import annotations

import os
from pathlib import Path

from dsh.tools.types import ToolError

__all__ = ["ReadLedger"]


class ReadLedger:
    """Per session: the files read, with the (size, mtime_ns) seen at that read.

    The status comes from the caller, taken on the descriptor it really read or wrote (never by
    looking the path up again, which a swapped symlink could point elsewhere)."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[str, tuple[int, int]]] = {}

    def record(self, session: str, path: Path, st: os.stat_result) -> None:
        self._seen.setdefault(session, {})[str(path)] = (st.st_size, st.st_mtime_ns)

    def check(self, session: str, path: Path, st: os.stat_result, verb: str, shown: str) -> None:
        """Refuse unless ``path`` was read by ``session`` and ``st`` (its status now) matches."""
        seen = self._seen.get(session, {}).get(str(path))
        if seen is None:
            raise ToolError(f'{verb} requires reading "{shown}" first — read the file, then retry', code="READ_FIRST")
        if (st.st_size, st.st_mtime_ns) != seen:
            raise ToolError(
                f'"{shown}" changed on disk since this session read it — re-read the file, then retry',
                code="STALE_READ",
            )
