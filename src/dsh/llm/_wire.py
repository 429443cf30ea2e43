"""Reading a provider's stream items, for both translators (:mod:`~dsh.llm.openai_stream`,
:mod:`~dsh.llm.anthropic_stream`).

Owns :func:`field` and :func:`integer`, which read SDK models (declared or extra fields) and
plain mappings alike, so neither translator needs an SDK import, and :func:`unknown_finish`, the
finish an unexpected stop reason becomes.
"""

from __future__ import annotations

from collections.abc import Mapping

from dsh.llm.types import FinishReason

__all__ = ["field", "integer", "unknown_finish"]


def field(obj: object, key: str) -> object:
    """A field of an SDK model (declared or extra) or of a plain mapping; ``None`` if absent."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def integer(value: object) -> int | None:
    """``value`` if it is an int (not a bool), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def unknown_finish(reason: str) -> FinishReason:
    """A stop reason dsh does not know → an ``error`` finish naming it."""
    return {"kind": "error", "message": f"model stopped: {reason}", "code": reason.upper()}
