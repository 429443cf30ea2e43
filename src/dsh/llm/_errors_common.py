"""What both HTTP adapters' error mappers share (:mod:`~dsh.llm.openai_errors`,
:mod:`~dsh.llm.anthropic_errors`).

Owns :class:`BaseErrorMapper`: the framing of every message (``<baseURL>: <cause>``, URL
credentials redacted by :mod:`dsh._redact`, the API key scrubbed out), an :class:`LlmError`
passed through as it is, and the wording and codes both providers use for an HTTP status
(``AUTH``, ``RATE_LIMIT``, ``INVALID_REQUEST``, ``SERVER``, ``HTTP_<s>``, the ``after 3
attempts`` note for what the SDK retried), timeouts (``TIMEOUT``), a refused or cut connection
(``CONNECTION``, ``STREAM_CLOSED``), an error reported in the stream and a malformed response
(``MALFORMED_RESPONSE``, else ``UNKNOWN``). Also :class:`IdleTimeout` and
:func:`provider_error`. A subclass maps its SDK's exception types onto these pieces in
``_cause``; this module imports no SDK.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from dsh._redact import redact_urls
from dsh.llm.types import LlmError

__all__ = ["STATUS_CAUSES", "BaseErrorMapper", "IdleTimeout", "provider_error"]

STATUS_CAUSES = {
    "AUTH": "authentication failed",
    "RATE_LIMIT": "rate limited",
    "INVALID_REQUEST": "request rejected",
    "SERVER": "server error",
    "HTTP_404": "not found (is the model name or the base URL wrong?)",
}


class IdleTimeout(Exception):
    """No chunk or event arrived within the timeout (raised inside the adapter's pump)."""


def provider_error(body: object) -> tuple[str | None, str | None]:
    """``(error.type, error.message)`` of an error body (the SDKs hand over either the whole
    body or its ``error`` object; a text body gives its first 500 characters as the message)."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping):
            body = inner
    if isinstance(body, Mapping):
        kind, message = body.get("type"), body.get("message")
        return (kind if isinstance(kind, str) else None, message if isinstance(message, str) and message else None)
    if isinstance(body, str) and body.strip():
        return None, body.strip()[:500]
    return None, None


@dataclass(frozen=True, slots=True)
class BaseErrorMapper:
    """Maps any failure of one adapter's requests to an :class:`LlmError` that names the
    endpoint and the cause and never contains the key (``scrub`` removes it)."""

    base_url: str
    timeout: float
    max_retries: int
    scrub: Callable[[str], str]

    # What a subclass adds: codes for statuses of its own, and their causes.
    special_statuses: ClassVar[Mapping[int, str]] = {}
    causes: ClassVar[Mapping[str, str]] = STATUS_CAUSES

    def __call__(self, err: BaseException, started: bool) -> LlmError:
        mapped = err if isinstance(err, LlmError) else self._cause(err, started)
        # Credentials in the endpoint URL (userinfo, ?api-key=) never reach the message, which
        # is printed, logged as turn/end.message and told to the model by turn-outcome.
        text = self.scrub(redact_urls(f"{self.base_url}: {mapped.message}"))
        return LlmError(text, code=mapped.code, status=mapped.status)

    def _cause(self, err: BaseException, started: bool) -> LlmError:
        """``err`` (anything but an :class:`LlmError`) → the cause, before the framing."""
        raise NotImplementedError

    @property
    def _after(self) -> str:
        # The SDK retries (before any output) until maxRetries is used up.
        tries = self.max_retries + 1
        return f" after {tries} attempts" if tries > 1 else ""

    def _status_code(self, status: int) -> str:
        if status in (401, 403):
            return "AUTH"
        if status == 429:
            return "RATE_LIMIT"
        if status == 400:
            return "INVALID_REQUEST"
        special = self.special_statuses.get(status)
        if special is not None:
            return special
        if status >= 500:
            return "SERVER"
        return f"HTTP_{status}"

    def _http_status(self, status: int, detail: str | None) -> LlmError:
        """The response's HTTP status (and the provider's message) says why it failed."""
        wire = f"HTTP {status}: {detail}" if detail else f"HTTP {status}"
        code = self._status_code(status)
        retried = status in (408, 409, 429) or status >= 500
        cause = self.causes.get(code, "the request failed")
        return LlmError(f"{cause}{self._after if retried else ''} ({wire})", code=code, status=status)

    def _timed_out(self, *, idle: bool) -> LlmError:
        """``idle``: nothing came within the timeout once the stream was open (the pump's idle
        timer, or an SDK read timeout after output began); else no response at all."""
        if idle:
            return LlmError(f"the model sent nothing for {self.timeout:g} s (idle timeout)", code="TIMEOUT")
        return LlmError(f"no response within {self.timeout:g} s{self._after} (timeout)", code="TIMEOUT")

    def _connection(self, origin: BaseException | None, started: bool) -> LlmError:
        """The connection failed (``origin``: the transport's own error, when known)."""
        detail = f" ({origin})" if origin is not None and str(origin) else ""
        if started:
            return LlmError(f"the model stream was cut off before it finished{detail}", code="STREAM_CLOSED")
        return LlmError(f"could not connect{self._after}{detail}", "CONNECTION")

    @staticmethod
    def _reported(message: str, code: str = "SERVER") -> LlmError:
        """An error event inside the stream."""
        return LlmError(f"the model reported an error: {message}", code=code)

    @staticmethod
    def _other(err: BaseException) -> LlmError:
        """Not the SDK's: a malformed payload or response, else whatever it was."""
        if isinstance(err, json.JSONDecodeError):
            return LlmError(f"malformed SSE payload: {err.doc[:120]}", code="MALFORMED_RESPONSE")
        if isinstance(err, ValueError | TypeError | AttributeError | KeyError):
            return LlmError(f"malformed response: {err}", code="MALFORMED_RESPONSE")
        return LlmError(f"{type(err).__name__}: {err}", code="UNKNOWN")
