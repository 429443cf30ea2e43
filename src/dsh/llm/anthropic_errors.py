"""Failures of an ``anthropic-llm`` request → :class:`~dsh.llm.types.LlmError`.

Owns the same codes and wording as :mod:`dsh.llm.openai_errors` (``<baseURL>: rate limited after
3 attempts (HTTP 429: <provider message>)``, ``STREAM_CLOSED`` for a cut stream, ``TIMEOUT``,
``CONNECTION``), plus ``OVERLOADED`` for Anthropic's HTTP 529 and its ``overloaded_error`` stream
event. The API key is scrubbed out. Imports the ``anthropic`` SDK (its error types) and
its HTTP client, so only the adapter imports this module.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import anthropic
import httpx2 as httpx  # the HTTP client the SDK is built on (its transport errors)

from dsh._redact import redact_urls
from dsh.llm.types import LlmError

__all__ = ["ErrorMapper", "IdleTimeout"]

_CAUSES = {
    "AUTH": "authentication failed",
    "RATE_LIMIT": "rate limited",
    "INVALID_REQUEST": "request rejected",
    "SERVER": "server error",
    "OVERLOADED": "overloaded",
    "HTTP_404": "not found (is the model name or the base URL wrong?)",
}


class IdleTimeout(Exception):
    """No event arrived within the timeout (raised inside the adapter's pump)."""


def _status_code(status: int) -> str:
    if status in (401, 403):
        return "AUTH"
    if status == 429:
        return "RATE_LIMIT"
    if status == 400:
        return "INVALID_REQUEST"
    if status == 529:
        return "OVERLOADED"
    if status >= 500:
        return "SERVER"
    return f"HTTP_{status}"


def _provider_error(body: object) -> tuple[str | None, str | None]:
    """``(error.type, error.message)`` of an Anthropic error body."""
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
class ErrorMapper:
    """Any failure of one adapter's requests → an :class:`LlmError` naming endpoint and cause."""

    base_url: str
    timeout: float
    max_retries: int
    scrub: Callable[[str], str]

    def __call__(self, err: BaseException, started: bool) -> LlmError:
        mapped = self._cause(err, started)
        text = self.scrub(redact_urls(f"{self.base_url}: {mapped.message}"))
        return LlmError(text, code=mapped.code, status=mapped.status)

    def _cause(self, err: BaseException, started: bool) -> LlmError:
        tries = self.max_retries + 1
        after = f" after {tries} attempts" if tries > 1 else ""
        if isinstance(err, LlmError):
            return err
        if isinstance(err, anthropic.APIStatusError):
            kind, detail = _provider_error(err.body)
            status = err.status_code
            if started or status == 200:  # an error event inside the stream
                code = "OVERLOADED" if kind == "overloaded_error" else "SERVER"
                return LlmError(f"the model reported an error: {detail or err.message}", code=code)
            wire = f"HTTP {status}: {detail}" if detail else f"HTTP {status}"
            code = _status_code(status)
            retried = status in (408, 409, 429) or status >= 500
            cause = _CAUSES.get(code, "the request failed")
            return LlmError(f"{cause}{after if retried else ''} ({wire})", code=code, status=status)
        if isinstance(err, IdleTimeout) or (started and isinstance(err, anthropic.APITimeoutError)):
            return LlmError(f"the model sent nothing for {self.timeout:g} s (idle timeout)", code="TIMEOUT")
        if isinstance(err, anthropic.APITimeoutError):
            return LlmError(f"no response within {self.timeout:g} s{after} (timeout)", code="TIMEOUT")
        if isinstance(err, anthropic.APIConnectionError | httpx.TransportError):
            origin = err.__cause__ if isinstance(err, anthropic.APIConnectionError) else err
            detail = f" ({origin})" if origin is not None and str(origin) else ""
            if started:
                return LlmError(f"the model stream was cut off before it finished{detail}", code="STREAM_CLOSED")
            return LlmError(f"could not connect{after}{detail}", "CONNECTION")
        if isinstance(err, json.JSONDecodeError):
            return LlmError(f"malformed SSE payload: {err.doc[:120]}", code="MALFORMED_RESPONSE")
        if isinstance(err, anthropic.APIError):
            return LlmError(f"the model reported an error: {err.message}", code="SERVER")
        if isinstance(err, ValueError | TypeError | AttributeError | KeyError):
            return LlmError(f"malformed response: {err}", code="MALFORMED_RESPONSE")
        return LlmError(f"{type(err).__name__}: {err}", code="UNKNOWN")
