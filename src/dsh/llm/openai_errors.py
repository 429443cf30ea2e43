"""Failures of an ``openai-llm`` request → :class:`~dsh.llm.types.LlmError` (docs/llm.md).

Owns the mapping of the ``openai`` SDK's error types onto the codes (``AUTH``, ``RATE_LIMIT``,
``INVALID_REQUEST``, ``SERVER``, ``HTTP_<s>``, ``TIMEOUT``, ``CONNECTION``, ``STREAM_CLOSED``,
``MALFORMED_RESPONSE``) and the text: it starts with the endpoint URL and names the cause
(``<baseURL>: rate limited after 3 attempts (HTTP 429: <provider message>)``), with the API key
scrubbed out and the URL's credentials redacted (:mod:`dsh._redact`). The wording and the
framing are :mod:`~dsh.llm._errors_common`'s, shared with ``anthropic-llm``. Imports the
``openai`` SDK (its error types), so only the adapter imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import openai

from dsh.llm._errors_common import BaseErrorMapper, IdleTimeout, provider_error
from dsh.llm.types import LlmError

__all__ = ["ErrorMapper", "IdleTimeout"]


@dataclass(frozen=True, slots=True)
class ErrorMapper(BaseErrorMapper):
    """Maps any failure of one adapter's requests to an :class:`LlmError` that names the
    endpoint and the cause and never contains the key (``scrub`` removes it)."""

    def _cause(self, err: BaseException, started: bool) -> LlmError:
        if isinstance(err, openai.APIStatusError):
            return self._http_status(err.status_code, provider_error(err.body)[1])
        # Once output has begun, an SDK read timeout is the same idle wait the pump times.
        if isinstance(err, IdleTimeout) or (started and isinstance(err, openai.APITimeoutError)):
            return self._timed_out(idle=True)
        if isinstance(err, openai.APITimeoutError):
            return self._timed_out(idle=False)
        if isinstance(err, openai.APIConnectionError):
            return self._connection(err.__cause__, started)
        if isinstance(err, openai.APIError):  # an error event inside the stream
            return self._reported(provider_error(err.body)[1] or err.message)
        return self._other(err)
