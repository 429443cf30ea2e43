"""Decoding event lines: the full decode, and the envelope check that skips ``data``.

Owns :class:`Envelope` and :data:`LAZY_TYPES` (the log-only events a first resume keeps as their
lines), :func:`decode_lazily`, and :func:`skipping_is_exact` (when skipping ``data`` accepts
exactly the lines a full decode accepts). Used by the committed-region scan in :mod:`._v0`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from dsh.session import Event
from dsh.session.event import restore_key_order

__all__ = ["LAZY_TYPES", "Envelope", "decode_lazily", "decode_or_none", "skipping_is_exact"]

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


def decode_lazily(lines: Sequence[bytes]) -> list[Event | None]:
    """Envelope-check every line; fully decode the ones whose type is not lazy."""
    decode = _ENVELOPE_DECODER.decode
    out: list[Any]
    try:
        out = list(map(decode, lines))
    except Exception:
        out = [envelope_or_none(line) for line in lines]
    lazy = LAZY_TYPES
    for index, envelope in enumerate(out):
        if envelope is not None and (envelope.type not in lazy or envelope.surface_op is not None):
            event = decode_or_none(lines[index])
            if event is not None and (
                event.surface_first
                or (event.surface_op is not None and event.source_event_seqs is not None)
            ):
                try:
                    event = restore_key_order(event, lines[index])
                except msgspec.ValidationError:  # a line spelling out "surface_first"
                    event = None
            out[index] = event
    return out


_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")


def skipping_is_exact(blob: bytes) -> bool:
    """Whether skipping ``data`` (:class:`Envelope`) accepts exactly the lines a full decode
    accepts, for every line in ``blob``.

    Skipping checks JSON syntax but neither UTF-8 inside strings nor float overflow (``1e999``,
    a 309-digit literal), which the full decode refuses. So: the text must be valid UTF-8, and
    hold no digit followed by ``e``/``E`` nor a 300-digit run (strings included, so a false
    alarm only costs the eager scan).
    """
    if not blob.isascii():
        try:
            blob.decode()
        except UnicodeDecodeError:
            return False
    digits = blob.translate(_DIGITS_TO_ZERO)
    return b"0e" not in digits and b"0E" not in digits and b"0" * 300 not in digits


def envelope_or_none(line: bytes) -> Envelope | None:
    try:
        return _ENVELOPE_DECODER.decode(line)
    except Exception:
        return None


def decode_or_none(line: bytes) -> Event | None:
    try:
        return _EVENT_DECODER.decode(line)
    except Exception:
        return None
