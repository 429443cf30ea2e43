"""JavaScript-compatible rendering, in one place.

Owns the few JavaScript behaviours dsh reproduces byte for byte because the reference harness
is TypeScript: ``String(value)`` and ``Number.prototype.toString()`` (the values in config
error messages), ``JSON.stringify`` for plain JSON values (tool arguments, compact JSON
texts), ``string.length`` (UTF-16 code units, for token estimates and usage counts) and
``Number.isSafeInteger``.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Final, TypeGuard

__all__ = [
    "MAX_SAFE_INTEGER",
    "is_safe_integer",
    "js_number",
    "js_string",
    "json_stringify",
    "utf16_length",
]

MAX_SAFE_INTEGER: Final = 2**53 - 1


def js_number(value: float) -> str:
    """``Number.prototype.toString()``: shortest round-trip digits, ECMAScript layout."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"
    if value < 0:
        return "-" + js_number(-value)
    # repr() yields the shortest round-trip digits; only their layout differs from JS.
    _, digit_tuple, exponent = Decimal(repr(value)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    k, n = len(digits), int(exponent) + len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return f"0.{'0' * -n}{digits}"
    e = n - 1
    mantissa = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{mantissa}e{'+' if e > 0 else '-'}{abs(e)}"


def js_string(value: object, _seen: frozenset[int] = frozenset()) -> str:
    """``String(value)`` for a decoded JSON (or YAML) value."""
    if value is True or value is False:
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        try:
            return js_number(float(value)) if abs(value) >= 10**21 else str(value)
        except OverflowError:
            return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, float):
        return js_number(value)
    if isinstance(value, (list, tuple)):
        # Array.prototype.join(","): null items are empty, a cycle renders as empty.
        if id(value) in _seen:
            return ""
        seen = _seen | {id(value)}
        return ",".join("" if item is None else js_string(item, seen) for item in value)
    if isinstance(value, dict):
        return "[object Object]"
    return str(value)


def json_stringify(value: object) -> str:
    """``JSON.stringify`` for plain JSON values: compact separators, non-ASCII kept raw."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def utf16_length(text: str) -> int:
    """JavaScript's ``string.length``: UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def is_safe_integer(value: object) -> TypeGuard[int | float]:
    """``Number.isSafeInteger`` for a decoded JSON value (``true`` is not one)."""
    if type(value) is int:
        return abs(value) <= MAX_SAFE_INTEGER
    if type(value) is float:
        return value.is_integer() and abs(value) <= MAX_SAFE_INTEGER
    return False
