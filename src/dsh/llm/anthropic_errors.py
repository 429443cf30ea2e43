"""Failures of an ``anthropic-llm`` request → :class:`~dsh.llm.types.LlmError`.

Owns the mapping of the ``anthropic`` SDK's error types (and its HTTP client's transport errors)
onto the same codes and wording as :mod:`dsh.llm.openai_errors` (``<baseURL>: rate limited after
3 attempts (HTTP 429: <provider message>)``, ``STREAM_CLOSED`` for a cut stream, ``TIMEOUT``,
``CONNECTION``; both are :mod:`~dsh.llm._errors_common`'s), plus ``OVERLOADED`` for Anthropic's
HTTP 529 and its ``overloaded_error`` stream event. The API key is scrubbed out. Imports the
``anthropic`` SDK (its error types) and its HTTP client, so only the adapter imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import anthropic
import httpx2 as httpx  # the HTTP client the SDK is built on (its transport errors)

from dsh.llm._errors_common import STATUS_CAUSES, BaseErrorMapper, IdleTimeout, provider_error
from dsh.llm.types import LlmError

__all__ = ["ErrorMapper", "IdleTimeout"]


@dataclass(frozen=True, slots=True)
class ErrorMapper(BaseErrorMapper):
    """Any failure of one adapter's requests → an :class:`LlmError` naming endpoint and cause."""

    special_statuses: ClassVar[Mapping[int, str]] = {529: "OVERLOADED"}
    causes: ClassVar[Mapping[str, str]] = {**STATUS_CAUSES, "OVERLOADED": "overloaded"}

    def _cause(self, err: BaseException, started: bool) -> LlmError:
        if isinstance(err, anthropic.APIStatusError):
            kind, detail = provider_error(err.body)
            if started or err.status_code == 200:  # an error event inside the stream
                return self._reported(detail or err.message, "OVERLOADED" if kind == "overloaded_error" else "SERVER")
            return self._http_status(err.status_code, detail)
        if isinstance(err, IdleTimeout) or (started and isinstance(err, anthropic.APITimeoutError)):
            return self._timed_out(idle=True)
        if isinstance(err, anthropic.APITimeoutError):
            return self._timed_out(idle=False)
        if isinstance(err, anthropic.APIConnectionError | httpx.TransportError):
            return self._connection(err.__cause__ if isinstance(err, anthropic.APIConnectionError) else err, started)
        if isinstance(err, anthropic.APIError):
            return self._reported(err.message)
        return self._other(err)
