"""Failures of an ``openai-llm`` request → :class:`~dsh.llm.types.LlmError` (docs/llm.md).

Owns the codes (``AUTH``, ``RATE_LIMIT``, ``INVALID_REQUEST``, ``SERVER``, ``HTTP_<s>``,
``TIMEOUT``, ``CONNECTION``, ``STREAM_CLOSED``, ``MALFORMED_RESPONSE``) and the text: it starts
with the endpoint URL and names the cause (``<baseURL>: rate limited after 3 attempts (HTTP 429:
<provider message>)``), with the API key scrubbed out and the URL's credentials redacted
(:mod:`dsh._redact`). Imports the ``openai`` SDK (its error
types), so only the adapter imports this module.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import openai

from dsh._redact import redact_urls
from dsh.llm.types import LlmError

__all__ = ["ErrorMapper", "IdleTimeout"]

_STATUS_CAUSES = {
    "AUTH": "authentication failed",
    "RATE_LIMIT": "rate limited",
    "INVALID_REQUEST": "request rejected",
    "SERVER": "server error",
    "HTTP_404": "not found (is the model name or the base URL wrong?)",
}


class IdleTimeout(Exception):
    """No chunk arrived within the timeout (raised inside the adapter's pump)."""


def _status_code(status: int) -> str:
    if status in (401, 403):
        return "AUTH"
    if status == 429:
        return "RATE_LIMIT"
    if status == 400:
        return "INVALID_REQUEST"
    if status >= 500:
        return "SERVER"
    return f"HTTP_{status}"


def _provider_message(body: object) -> str | None:
    """``error.message`` of an error body (the SDK hands over the ``error`` object itself)."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping):
            body = inner
        message = body.get("message") if isinstance(body, Mapping) else None
        if isinstance(message, str) and message:
            return message
    elif isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return None


def _seconds(value: float) -> str:
    return f"{value:g} s"


@dataclass(frozen=True, slots=True)
class ErrorMapper:
    """Maps any failure of one adapter's requests to an :class:`LlmError` that names the
    endpoint and the cause and never contains the key (``scrub`` removes it)."""

    base_url: str
    timeout: float
    max_retries: int
    scrub: Callable[[str], str]

    def __call__(self, err: BaseException, started: bool) -> LlmError:
        mapped = self._cause(err, started)
        # Credentials in the endpoint URL (userinfo, ?api-key=) never reach the message, which
        # is printed, logged as turn/end.message and told to the model by turn-outcome.
        text = self.scrub(redact_urls(f"{self.base_url}: {mapped.message}"))
        return LlmError(text, code=mapped.code, status=mapped.status)

    def _cause(self, err: BaseException, started: bool) -> LlmError:
        # The SDK retries these (before any output) until maxRetries is used up.
        tries = self.max_retries + 1
        after = f" after {tries} attempts" if tries > 1 else ""
        if isinstance(err, LlmError):
            return err
        if isinstance(err, openai.APIStatusError):
            status = err.status_code
            detail = _provider_message(err.body)
            wire = f"HTTP {status}: {detail}" if detail else f"HTTP {status}"
            code = _status_code(status)
            retried = status in (408, 409, 429) or status >= 500
            cause = _STATUS_CAUSES.get(code, "the request failed")
            return LlmError(f"{cause}{after if retried else ''} ({wire})", code=code, status=status)
        # Once output has begun, an SDK read timeout is the same idle wait the pump times.
        if isinstance(err, IdleTimeout) or (started and isinstance(err, openai.APITimeoutError)):
            return LlmError(
                f"the model sent nothing for {_seconds(self.timeout)} (idle timeout)", code="TIMEOUT"
            )
        if isinstance(err, openai.APITimeoutError):
            return LlmError(
                f"no response within {_seconds(self.timeout)}{after} (timeout)", code="TIMEOUT"
            )
        if isinstance(err, openai.APIConnectionError):
            origin = err.__cause__
            detail = f" ({origin})" if origin is not None and str(origin) else ""
            if started:
                return LlmError(
                    f"the model stream was cut off before it finished{detail}", code="STREAM_CLOSED"
                )
            return LlmError(f"could not connect{after}{detail}", "CONNECTION")
        if isinstance(err, json.JSONDecodeError):
            return LlmError(f"malformed SSE payload: {err.doc[:120]}", code="MALFORMED_RESPONSE")
        if isinstance(err, openai.APIError):  # an error event inside the stream
            message = _provider_message(err.body) or err.message
            return LlmError(f"the model reported an error: {message}", code="SERVER")
        if isinstance(err, ValueError | TypeError | AttributeError | KeyError):
            return LlmError(f"malformed response: {err}", code="MALFORMED_RESPONSE")
        return LlmError(f"{type(err).__name__}: {err}", code="UNKNOWN")
