"""Lossless JSON: the only data dsh accepts into a durable record.

Owns the snapshot rule for durable data (null, bool, str, finite numbers other than ``-0``,
lists and str-keyed dicts; nothing else), the compact encoding used for every durable line
(``separators=(",", ":")``, non-ASCII unescaped, insertion key order), and the decoder.

The fast path encodes with msgspec and decodes the bytes back: the decoded value is both the
validation witness and the caller-independent snapshot. Anything msgspec would coerce (NaN and
infinities to ``null``, tuples and sets to arrays, ``int`` keys to strings, dataclasses, datetimes,
bytes) no longer compares equal to the input, so one C-level ``==`` rejects it.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()

encode = _encoder.encode
"""Compact JSON bytes of a lossless value (no validation)."""

decode = _decoder.decode
"""Parse JSON bytes or str into plain Python values."""


class NotLosslessJSON(TypeError):
    """Raised when a value is not lossless JSON."""


def _is_lossless(value: Any, seen: set[int]) -> bool:
    """Slow, exact check; only used to double-check values the fast path flagged."""
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is int:
        return True
    if kind is float:
        return math.isfinite(value) and not (value == 0.0 and math.copysign(1.0, value) < 0)
    if kind is list or kind is dict:
        if id(value) in seen:
            return False
        seen.add(id(value))
        try:
            if kind is list:
                return all(_is_lossless(item, seen) for item in value)
            return all(type(k) is str and _is_lossless(v, seen) for k, v in value.items())
        finally:
            seen.discard(id(value))
    return False


def snapshot(value: Any) -> tuple[Any, bytes]:
    """Return ``(copy, encoded)`` for a lossless JSON value, or raise :class:`NotLosslessJSON`.

    The copy shares nothing with ``value``, so a caller mutating its input later cannot change a
    committed record; ``encoded`` is the compact durable form.
    """
    try:
        encoded = _encoder.encode(value)
    except (TypeError, ValueError, RecursionError, OverflowError) as exc:
        raise NotLosslessJSON(str(exc)) from None
    copy = _decoder.decode(encoded)
    # ``-0.0 == 0.0`` survives the equality check, so look for it in the bytes; a hit is rare
    # (only a string containing "-0" or a real negative zero) and falls back to the exact walk.
    if copy != value or (b"-0" in encoded and not _is_lossless(value, set())):
        raise NotLosslessJSON("value is not lossless JSON")
    return copy, encoded


def is_lossless(value: Any) -> bool:
    """Exact check that ``value`` is lossless JSON (no coercion, no cycles, no ``-0``)."""
    return _is_lossless(value, set())


def dumps(value: Any) -> str:
    """Compact JSON text, as the reference's ``JSON.stringify`` writes it."""
    return _encoder.encode(value).decode()
