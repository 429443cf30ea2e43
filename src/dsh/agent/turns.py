"""Turn-ending errors: :class:`TurnError` and :func:`reason_for`, the ``{kind: 'error'}`` reason
of a failure. A leaf module: the agent handle and the loop both use it."""

from __future__ import annotations

from dsh.session.vocab import ErrorReason, error_reason


class TurnError(Exception):
    """A failure that ends a turn with ``{kind: 'error', step, message, code?}``."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


def error_code(exc: BaseException) -> str | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else None


def reason_for(step: int, exc: BaseException) -> ErrorReason:
    """The turn-end reason of a failure; a non-``Exception`` without a code gets ``UNKNOWN``."""
    code = error_code(exc)
    if code is None and not isinstance(exc, Exception):
        code = "UNKNOWN"
    return error_reason(step, str(exc) or type(exc).__name__, code)
