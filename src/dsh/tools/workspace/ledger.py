"""The read-before-write ledger of the workspace file tools (its own module, so the shared
config can name it without importing the tools that use it)."""

from __future__ import annotations

from pathlib import Path

from dsh.tools.types import ToolError

__all__ = ["ReadLedger"]


class ReadLedger:
    """Per session: the files read, with the (size, mtime_ns) seen at that read."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[str, tuple[int, int]]] = {}

    def record(self, session: str, path: Path) -> None:
        st = path.stat()
        self._seen.setdefault(session, {})[str(path)] = (st.st_size, st.st_mtime_ns)

    def check(self, session: str, path: Path, verb: str, shown: str) -> None:
        seen = self._seen.get(session, {}).get(str(path))
        if seen is None:
            raise ToolError(f'{verb} requires reading "{shown}" first — read the file, then retry', code="READ_FIRST")
        st = path.stat()
        if (st.st_size, st.st_mtime_ns) != seen:
            raise ToolError(
                f'"{shown}" changed on disk since this session read it — re-read the file, then retry',
                code="STALE_READ",
            )
