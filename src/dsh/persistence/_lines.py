"""Decoding event lines: the full decode, and the envelope check that skips ``data``.

Owns :class:`Envelope` and :data:`LAZY_TYPES` (the log-only events a first resume keeps as their
lines), :func:`decode_lazily` (every line of a log envelope-checked, only the ones the load reads
decoded, once) and the search for what skipping ``data`` would miss. Used by the
committed-region scan in :mod:`._v0`.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from itertools import accumulate
from operator import attrgetter
from typing import Any, NamedTuple

import msgspec

from dsh import _json
from dsh.session import Event
from dsh.session.event import restore_key_order

__all__ = ["LAZY_TYPES", "Envelope", "Kept", "LazyLines", "decode_lazily", "decode_or_none"]

_EVENT_DECODER = msgspec.json.Decoder(Event)


class Envelope(
    msgspec.Struct,
    frozen=True,
    gc=False,
    forbid_unknown_fields=True,
    rename={"source_event_seqs": "sourceEventSeqs", "surface_op": "surfaceOp"},
):
    """An event line checked like :class:`~dsh.session.Event` without building its ``data``."""

    type: str
    seq: int
    time: int
    data: msgspec.Raw
    source_event_seqs: list[int] | None = None
    surface_op: str | dict[str, Any] | None = None


LAZY_TYPES = frozenset({"assistant/chunk", "step/start", "step/end", "tool/call", "turn/end"})
"""Log-only types whose data neither the fold nor the load checks read (the others are decoded
at load: surface messages, ``turn/start``, ``request/header``, plugin types)."""

_ENVELOPE_DECODER = msgspec.json.Decoder(Envelope)


class Kept(msgspec.Struct, frozen=True, gc=False):
    """Stands for a line kept as it is: a checked event of a lazy type, without ``surfaceOp`` or
    ``sourceEventSeqs``, with a non-negative ``time`` and the seq of its index."""

    type: str


_KEPT = {kind: Kept(kind) for kind in LAZY_TYPES}


class LazyLines(NamedTuple):
    """What :func:`decode_lazily` made of a log's lines."""

    items: list[Any]
    """Per line: the decoded :class:`Event`, or the :class:`Kept` that stands for it."""
    decoded: list[int]
    """The indexes of the decoded events, in order."""
    ends: list[int]
    """The indexes of the kept ``turn/end`` lines, in order."""
    starts: array[int]
    """Where each line starts in the log, then where the last one ends (past its newline)."""


_BLOCK = 1 << 17
"""Lines are split, checked and decoded 128 KiB at a time: only that much of the log exists twice
(as the log and as line objects) while it is scanned, and it stays in the CPU's caches, which
larger blocks outgrow."""

_PLUS_ONE = (1).__add__
_TYPE_OF = attrgetter("type")


def decode_lazily(blob: bytes, begin: int, end: int) -> LazyLines | None:
    """Every event line of ``blob[begin:end]`` (complete lines, each ending with a newline)
    envelope-checked; the ones the load must read decoded in full, once.

    A line is kept as it is (a :class:`Kept` item) when it is a lazy type without ``surfaceOp``
    or ``sourceEventSeqs``, with a non-negative ``time``, and the search for what skipping
    ``data`` misses does not name it: then a full decode of it would succeed and the load checks
    would pass. Returns ``None`` when a line does not decode, holds ``-0`` or has a seq other
    than its index, or when the text is not valid UTF-8: the caller then runs the exact scan,
    which names the line.
    """
    items: list[Any] = []
    decoded: list[int] = []
    ends: list[int] = []
    starts = array("Q", [begin])
    decode = _ENVELOPE_DECODER.decode
    lazy = LAZY_TYPES
    kept = _KEPT
    low = begin
    while low < end:
        high = blob.find(b"\n", min(low + _BLOCK, end) - 1) + 1
        text = blob[low:high]
        if not text.isascii():
            try:
                text.decode()
            except UnicodeDecodeError:
                return None
        lines = text.split(b"\n")
        lines.pop()  # empty: the block ends with a newline
        offsets = accumulate(map(_PLUS_ONE, map(len, lines)), initial=low)
        next(offsets)
        starts.extend(offsets)
        try:
            envelopes = list(map(decode, lines))
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return None
        first = len(items)
        block: list[int] = []  # the lines of this block to decode
        block_ends: list[int] = []
        for index, envelope in enumerate(envelopes, first):
            if envelope.seq != index:
                return None
            kind = envelope.type
            if (
                kind in lazy
                and envelope.surface_op is None
                and envelope.source_event_seqs is None
                and envelope.time >= 0
            ):
                if kind == "turn/end":
                    block_ends.append(index)
            else:
                block.append(index)
        # A Kept for each line of a lazy type, its envelope for the others (replaced below).
        items += map(kept.get, map(_TYPE_OF, envelopes), envelopes)
        suspects = _suspects(text, low, starts, first)
        if suspects:
            block = sorted(suspects.union(block))
            block_ends = [index for index in block_ends if index not in suspects]
        if block and not _decode_into(items, block, [lines[index - first] for index in block], suspects):
            return None
        decoded += block
        ends += block_ends
        low = high
    return LazyLines(items, decoded, ends, starts)


def _decode_into(
    items: list[Any], indexes: list[int], lines: list[bytes], suspects: set[int]
) -> bool:
    """Decode ``lines`` in full (one call), as the exact scan does, into ``items`` at
    ``indexes``; ``False`` where the exact scan refuses one of them."""
    try:
        events = _EVENT_DECODER.decode_lines(b"\n".join(lines))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return False
    if len(events) != len(lines):  # each line was one object: cannot happen
        return False
    for index, event, line in zip(indexes, events, lines, strict=True):
        if event.surface_first or (
            event.surface_op is not None and event.source_event_seqs is not None
        ):
            try:
                event = restore_key_order(event, line)
            except msgspec.ValidationError:  # a line spelling out "surface_first"
                return False
        if index in suspects and _json.may_hold_negative_zero(line) and _json.has_negative_zero(line):
            return False
        items[index] = event
    return True


# What skipping ``data`` misses, where a full decode refuses the line: a number too large for a
# float (an exponent: ``1e999``; or 309 digits before the point), an integer of more than 4300
# digits, and ``-0`` (the load refuses it). An exponent is ``e``/``E``, maybe a sign, then a
# digit; ``-0`` is a minus then a digit. So one table maps digits to ``0`` and ``e``, ``E``,
# ``-``, ``+`` to ``e``, every other byte to NUL: one substring search (``e0``) finds every
# exponent and every negative number, another every run of 300 digits. The search does not know
# strings from numbers (``2026-07``, ``file1`` are hits): a hit costs only that line's full decode.
_SUSPECT_TABLE = bytes(
    0x30 if byte in b"0123456789" else 0x65 if byte in b"eE-+" else 0 for byte in range(256)
)
_NEEDLES = (b"e0", b"0" * 300)


def _suspects(text: bytes, low: int, starts: array[int], first: int) -> set[int]:
    """The indexes of the lines in ``text`` (log bytes from offset ``low``, whole lines at
    ``starts``, the first of them line ``first``) that hold an exponent, a negative number or
    a run of 300 digits."""
    found: set[int] = set()
    mapped = text.translate(_SUSPECT_TABLE)
    for needle in _NEEDLES:
        at = mapped.find(needle)
        while at != -1:
            line = bisect_right(starts, low + at, first) - 1
            found.add(line)
            at = mapped.find(needle, starts[line + 1] - low)
    return found


def decode_or_none(line: bytes) -> Event | None:
    try:
        return _EVENT_DECODER.decode(line)
    except Exception:
        return None
