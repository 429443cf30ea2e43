"""Fold snapshots: a cache of a loaded session's fold, keyed to the exact log bytes it covers.

Owns the snapshot file format and its checks, and the two conversions every store uses: a
loaded session to a snapshot (:func:`snapshot`) and a snapshot back to a session whose events
are decoded on first access (:func:`resume`). A snapshot records, for a prefix of a session's
log in the v0 line format (header line included, ending just after a ``turn/end`` line): the
prefix's length and SHA-1, where each event line starts, and the session's fold of those
events (surface, derived messages, replace generation, turn counters). A store that finds a
snapshot matching the first bytes of the log resumes from it and validates only the lines after
it; the prefix's events are decoded on first access.

A snapshot is only ever a cache. It is used only when its own checksum holds and the log's
first ``size`` bytes hash to its digest, so a corrupted, truncated or stale snapshot, or a log
rewritten by another program, changes nothing: the store loads the log in full as if there
were no snapshot (and writes a fresh one). It is written atomically (temporary file and
rename) without fsync: a snapshot lost or torn by a power cut fails its checksum.

File layout: ``MAGIC``, the SHA-1 of the body (20 bytes), the body (MessagePack of
:class:`Fold`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from array import array
from collections.abc import Mapping, Sequence
from itertools import accumulate
from typing import Any, NamedTuple

import msgspec

from dsh.session import Session
from dsh.session.raw import RawEvents

__all__ = [
    "MIN_EVENTS",
    "Fold",
    "FoldState",
    "digest",
    "digest_parts",
    "fold_matches",
    "fold_state",
    "line_starts",
    "load_fold",
    "read_fold",
    "remove_fold",
    "resume",
    "snapshot",
    "write_fold",
]

MAGIC = b"dsh-fold v1\n"
MIN_EVENTS = 4096
"""Logs shorter than this load fast enough without a snapshot; none is written for them."""
_SUM = 20  # SHA-1 digest length


class Fold(msgspec.Struct, array_like=True, gc=False):
    """The fold of the first ``len(starts) - 1`` events of a log whose first ``size`` bytes
    hash to ``digest``. ``starts`` is ``array('Q')`` bytes: where each event line starts, then
    ``size``."""

    size: int
    digest: bytes
    starts: bytes
    surface: list[int]
    messages: list[dict[str, Any]]
    replace_generation: int
    last_turn: int


class FoldState(NamedTuple):
    """A loaded session's fold, taken when it was loaded (see :func:`fold_state`)."""

    length: int
    surface: list[int]
    messages: list[dict[str, Any]]
    replace_generation: int
    last_turn: int


def fold_state(session: Session) -> FoldState:
    """The fold of a loaded ``session`` that ends at a ``turn/end``, as it is now (a snapshot
    written later, while the session goes on, still holds this)."""
    surface, messages, generation, last_turn, open_turn = session.fold_state()
    assert open_turn is None
    return FoldState(len(session), surface, messages, generation, last_turn)


def snapshot(state: FoldState, key: bytes, starts: array[int]) -> Fold:
    """The snapshot of a session's fold ``state`` whose log's first ``starts[-1]`` bytes hash to
    ``key`` (``starts``: where each event line starts, then that end)."""
    assert len(starts) == state.length + 1
    return Fold(
        starts[-1],
        key,
        starts.tobytes(),
        state.surface,
        state.messages,
        state.replace_generation,
        state.last_turn,
    )


def resume(
    fold: Fold, session_id: str, raw: RawEvents, header: Mapping[str, object]
) -> Session:
    """The session ``fold`` snapshots, its events decoded from ``raw`` on first access."""
    return Session.from_fold(
        session_id,
        raw,
        header=header,
        surface=fold.surface,
        messages=fold.messages,
        replace_generation=fold.replace_generation,
        last_turn=fold.last_turn,
        open_turn=None,
    )


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Fold)


def digest(data: bytes | memoryview) -> bytes:
    """The key of a byte prefix (SHA-1: a cache key against accidents, not an adversary)."""
    return hashlib.sha1(data, usedforsecurity=False).digest()


def digest_parts(*parts: bytes) -> bytes:
    """:func:`digest` of the concatenation of ``parts`` (without building it)."""
    key = hashlib.sha1(usedforsecurity=False)
    for part in parts:
        key.update(part)
    return key.digest()


def line_starts(first: int, lines: Sequence[bytes]) -> array[int]:
    """Where each of ``lines`` starts when laid out from ``first`` with a newline after each,
    then where the last one ends (one more entry than ``lines``)."""
    return array("Q", accumulate(map(_PLUS_ONE, map(len, lines)), initial=first))


_PLUS_ONE = (1).__add__


def load_fold(path: str) -> tuple[Fold, array[int]] | None:
    """The snapshot at ``path`` and its line starts, when the file is intact, else ``None``.

    Whether it matches a log is :func:`fold_matches`'s question.
    """
    try:
        with open(path, "rb") as file:
            blob = file.read()
    except OSError:
        return None
    start = len(MAGIC) + _SUM
    if len(blob) < start or not blob.startswith(MAGIC):
        return None
    body = memoryview(blob)[start:]
    if digest(body) != blob[len(MAGIC) : start]:
        return None
    try:
        fold = _decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    starts = array("Q")
    if len(fold.starts) % starts.itemsize:
        return None
    starts.frombytes(fold.starts)
    if len(starts) < 2 or starts[-1] != fold.size:
        return None
    return fold, starts


def fold_matches(fold: Fold, starts: array[int], log: bytes, header_end: int) -> bool:
    """Whether ``fold`` covers a prefix of ``log`` (whose header line ends at ``header_end``):
    its first ``fold.size`` bytes hash to the snapshot's key."""
    size = fold.size
    return (
        header_end < size <= len(log)
        and log[size - 1] == 0x0A
        and starts[0] == header_end
        and digest(memoryview(log)[:size]) == fold.digest
    )


def read_fold(path: str, log: bytes, header_end: int) -> tuple[Fold, array[int]] | None:
    """The snapshot at ``path`` when it is intact and covers a prefix of ``log``, else ``None``."""
    found = load_fold(path)
    if found is None or not fold_matches(found[0], found[1], log, header_end):
        return None
    return found


def write_fold(path: str, fold: Fold) -> None:
    """Replace the snapshot at ``path`` atomically; a failure only leaves no snapshot."""
    try:
        body = _encoder.encode(fold)
    except (msgspec.EncodeError, OverflowError, TypeError):  # e.g. an integer past 64 bits
        remove_fold(path)
        return
    temp = path + ".tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            data = MAGIC + digest(body) + body
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)


def remove_fold(path: str) -> None:
    """Drop the snapshot at ``path`` (and a temporary one), if any."""
    for name in (path, path + ".tmp"):
        with contextlib.suppress(OSError):
            os.unlink(name)
