"""Lossless JSON: the only data dsh accepts into a durable record.

Owns the lossless rule for durable data (null, bool, str, finite numbers other than ``-0``,
lists and str-keyed dicts; nothing else), the compact encoding used for every durable line
(``separators=(",", ":")``, non-ASCII unescaped, insertion key order), and the decoder.

The fast path encodes with msgspec and decodes the bytes back: the decoded value is both the
validation witness and the caller-independent snapshot. Anything msgspec would coerce (NaN and
infinities to ``null``, tuples and sets to arrays, ``int`` keys to strings, dataclasses, datetimes,
bytes) no longer compares equal to the input, so one C-level ``==`` rejects it.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()

encode = _encoder.encode
"""Compact JSON bytes of a lossless value (no validation)."""

decode = _decoder.decode
"""Parse JSON bytes or str into plain Python values."""


# Any encoding of zero has a "0"; msgspec writes -0.0 as "-0.0", whose "." is the rarer byte.
_NEGATIVE_ZERO_MARK = 46 if 46 in encode(-0.0) else 48


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


def lossless_copy(value: Any) -> Any:
    """A copy of a lossless JSON value sharing nothing with it, or raise :class:`NotLosslessJSON`.

    A caller mutating its input later cannot change a committed record.
    """
    try:
        encoded = encode(value)
    except (TypeError, ValueError, RecursionError, OverflowError) as exc:
        raise NotLosslessJSON(str(exc)) from None
    copy = decode(encoded)
    # ``-0.0 == 0.0`` survives the equality check, so look for it in the bytes, first with one
    # memchr for the byte every encoding of -0.0 holds (a bytes search costs more than the rest
    # of the check). A hit is rare (a string containing "-0", or a real negative zero) and falls
    # back to the exact walk.
    if copy != value or (
        _NEGATIVE_ZERO_MARK in encoded
        and may_hold_negative_zero(encoded)
        and not _is_lossless(value, set())
    ):
        raise NotLosslessJSON("value is not lossless JSON")
    return copy


def is_lossless(value: Any) -> bool:
    """Exact check that ``value`` is lossless JSON (no coercion, no cycles, no ``-0``)."""
    return _is_lossless(value, set())


def dumps(value: Any) -> str:
    """Compact JSON text, as the reference's ``JSON.stringify`` writes it."""
    return _encoder.encode(value).decode()


def may_hold_negative_zero(text: bytes) -> bool:
    """Whether compact JSON ``text`` has ``-0`` where a number could start (``:-0``, ``,-0``,
    ``[-0`` or at the very start): the cheap test before an exact check.

    One pass over the ``-0`` hits (dates put thousands in a long log); past a cap, three
    substring scans are cheaper than the Python loop.
    """
    find = text.find
    at = find(b"-0")
    hits = 0
    while at != -1:
        if not at or text[at - 1] in b":,[":
            return True
        hits += 1
        if hits > 50_000:
            return any(hint in text for hint in (b":-0", b",-0", b"[-0"))
        at = find(b"-0", at + 2)
    return False


def has_negative_zero(text: bytes) -> bool:
    """Whether a JSON text holds a ``-0`` number token (strings are never looked at).

    Every durable-line reader and writer asks this one function (after
    :func:`may_hold_negative_zero`): ``-0`` is valid JSON that the reference cannot round-trip.
    """
    found = False

    def number(token: str) -> int:
        nonlocal found
        if token.startswith("-") and float(token) == 0:
            found = True
        return 0

    try:
        json.loads(text, parse_int=number, parse_float=number)
    except (ValueError, RecursionError):
        return False
    return found
