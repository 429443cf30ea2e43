"""The spill store: files holding complete outputs the model only saw the tail (or head) of, in
this process's private folder (:mod:`.private`), under a byte cap per call and per session.

Why caps: a command's output is written as it comes (``yes`` writes gigabytes a minute), and the
files stay until the session ends, because a result the model read still points to them. So a
call keeps at most ``maxSpillBytes`` of output on disk (default 64 MiB) and a session at most
``maxSessionSpillBytes`` (default 256 MiB); past the cap only the head is kept on disk and the
last ``maxOutputBytes`` in memory, and the result says what was kept (:func:`cap_note`). The
whole folder is removed when the plugin is disposed.

:class:`Capture` is one output stream of a command, fed from a pipe by :mod:`.process`.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Final

from dsh.tools.workspace.private import PrivateDir

__all__ = ["DEFAULT_CALL_BYTES", "DEFAULT_SESSION_BYTES", "Budget", "Capture", "SpillStore", "cap_note"]

DEFAULT_CALL_BYTES: Final = 64 * 1024 * 1024
DEFAULT_SESSION_BYTES: Final = 256 * 1024 * 1024


class SpillStore:
    """``<private folder>/<session>/<kind>-<id>.txt``, with the byte budget of each session."""

    def __init__(
        self,
        directory: str | None,
        *,
        max_call_bytes: int = DEFAULT_CALL_BYTES,
        max_session_bytes: int = DEFAULT_SESSION_BYTES,
    ) -> None:
        self.folder = PrivateDir("dsh-spill-", directory)
        self.max_call_bytes = max_call_bytes
        self.max_session_bytes = max_session_bytes
        self._used: dict[str, int] = {}

    def session_dir(self, session: str) -> Path:
        return self.folder.session_dir(session)

    def path_for(self, session: str, kind: str) -> Path:
        return self.session_dir(session) / f"{kind}-{uuid.uuid4().hex[:12]}.txt"

    def budget(self, session: str) -> Budget:
        """The budget of one call (its own cap, drawing on the session's)."""
        return Budget(self, session)

    def session_left(self, session: str) -> int:
        return max(0, self.max_session_bytes - self._used.get(session, 0))

    def charge(self, session: str, size: int) -> None:
        self._used[session] = self._used.get(session, 0) + size

    def release(self, session: str, size: int) -> None:
        """Give back the bytes of a file that was removed."""
        self._used[session] = max(0, self._used.get(session, 0) - size)

    def note(self, kept: int, total: int, path: Path | None) -> str:
        return cap_note(kept, total, path, self.max_call_bytes, self.max_session_bytes)

    def save(self, session: str, kind: str, content: str) -> Path:
        """``content`` in a new file, cut at the budget (a last line then says so)."""
        path = self.path_for(session, kind)
        data = content.encode("utf-8", errors="replace")
        kept = self.budget(session).take(len(data))
        with open(path, "wb") as fh:
            fh.write(data[:kept])
            if kept < len(data):
                fh.write(f"\n[{self.note(kept, len(data), None)}]\n".encode())
        return path

    def dispose(self) -> None:
        self.folder.dispose()
        self._used.clear()


class Budget:
    """What one call may still write: its own cap and what is left of the session's."""

    def __init__(self, store: SpillStore, session: str) -> None:
        self.store = store
        self.session = session
        self.left = store.max_call_bytes

    def take(self, size: int) -> int:
        """How many of ``size`` bytes may be written (and charge them)."""
        allowed = max(0, min(size, self.left, self.store.session_left(self.session)))
        self.left -= allowed
        self.store.charge(self.session, allowed)
        return allowed


def cap_note(kept: int, total: int, path: Path | None, per_call: int, per_session: int) -> str:
    """What was kept of an output larger than the spill cap (the text of a result marker)."""
    caps = f"spill cap: {per_call} bytes per call, {per_session} per session"
    if kept <= 0 or path is None:
        return f"full output not saved ({caps}, used up)"
    return f"the first {kept} of {total} bytes were kept in {path} ({caps})"


class Capture:
    """One output stream of a command: written to ``path`` while the budget allows, and its last
    ``tail_bytes`` always kept in memory. Once the budget refuses a byte, nothing more is written
    (the file stays the exact head of the stream)."""

    def __init__(self, path: Path, budget: Budget, tail_bytes: int) -> None:
        self.path = path
        self.budget = budget
        self.tail_bytes = tail_bytes
        self.kept = 0
        self.total = 0
        self.full = False
        self._tail = bytearray()
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        if not self.full and self._fd is not None:
            room = self.budget.take(len(data))
            if room:
                view = memoryview(data)[:room]
                while view:
                    view = view[os.write(self._fd, view) :]
                self.kept += room
            if room < len(data):
                self.full = True
        self._tail += data[-self.tail_bytes :]
        if len(self._tail) > self.tail_bytes:
            del self._tail[: len(self._tail) - self.tail_bytes]

    @property
    def overflowed(self) -> bool:
        return self.total > self.kept

    def tail(self) -> bytes:
        return bytes(self._tail)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def discard(self) -> None:
        """Remove the file and give its bytes back to the session's budget."""
        self.close()
        self.path.unlink(missing_ok=True)
        self.budget.store.release(self.budget.session, self.kept)
        self.kept = 0
