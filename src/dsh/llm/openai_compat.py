"""DeepSeek and any OpenAI-compatible chat-completions endpoint, as the ``openai-llm`` plugin.

Owns :class:`OpenAICompatAdapter` (the transport, its timeouts and cancellation) and the plugin
(``name``, ``inject``, ``apply``). Transport is the official ``openai`` SDK's ``AsyncOpenAI``
(its HTTP client, SSE decoding, retries, timeouts and error types). The mappings live next to
it (docs/llm.md): :mod:`~dsh.llm.openai_config` (config, key and URL resolution),
:mod:`~dsh.llm.openai_request` (request → wire), :mod:`~dsh.llm.openai_stream` (wire chunks →
dsh chunks) and :mod:`~dsh.llm.openai_errors` (failures → :class:`~dsh.llm.types.LlmError`);
their public names are re-exported here.

Retries (``maxRetries``, default 2) are the SDK's and only happen before the response starts;
nothing is retried once output has begun. ``timeoutSeconds`` (default 120) bounds each attempt's
wait for the response to start and every wait for the next chunk (an idle timeout, not a limit
on the whole reply); when it runs out the request fails with code ``TIMEOUT``. An aborted
``request.signal`` cancels the task that reads the HTTP stream, which closes the stream, and the
iterator ends with finish ``{kind:'aborted'}``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import openai

from dsh._redact import redact_url
from dsh._secrets import register_secret_env
from dsh.llm.openai_config import (
    DEFAULT_BASE_URL,
    DEFAULT_MODELS,
    DEFAULT_TIMEOUT_SECONDS,
    KEY_ENV,
    REDACTED,
    Config,
    resolve_api_key,
    resolve_base_url,
)
from dsh.llm.openai_errors import ErrorMapper, IdleTimeout
from dsh.llm.openai_request import build_messages, build_tools, request_kwargs
from dsh.llm.openai_stream import Translator, map_finish_reason, map_usage
from dsh.llm.pump import pumped
from dsh.llm.service import LLM
from dsh.llm.types import LlmError, LlmRequest, StreamChunk

if TYPE_CHECKING:
    from dsh.runtime import Context

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MODELS",
    "DEFAULT_TIMEOUT_SECONDS",
    "Config",
    "OpenAICompatAdapter",
    "apply",
    "build_messages",
    "build_tools",
    "create_adapter",
    "inject",
    "map_finish_reason",
    "map_usage",
    "name",
    "resolve_api_key",
    "resolve_base_url",
]

name = "openai-llm"
inject = ["llm"]


def _user_agent() -> str:
    try:
        return f"dsh/{_dist_version('dsh')}"
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "dsh"


class OpenAICompatAdapter:
    """Streams chat completions from an OpenAI-compatible endpoint through ``AsyncOpenAI``."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        max_retries: int = 2,
        timeout_seconds: float | None = None,
        thinking: Literal["enabled", "disabled"] | None = None,
        reasoning_effort: str | None = None,
        extra_body: Mapping[str, object] | None = None,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        if not api_key:
            raise LlmError("an API key is required", code="NO_API_KEY")
        self._api_key = api_key
        self.base_url = base_url
        self.max_retries = max_retries
        self.timeout = timeout_seconds if timeout_seconds is not None else DEFAULT_TIMEOUT_SECONDS
        self._extra_body: dict[str, object] = {}
        if thinking is not None:
            self._extra_body["thinking"] = {"type": thinking}
        if reasoning_effort is not None:
            self._extra_body["reasoning_effort"] = reasoning_effort
        if extra_body:
            self._extra_body.update(extra_body)
        self._error = ErrorMapper(base_url, self.timeout, max_retries, self.scrub)
        if client is None:
            client = openai.AsyncOpenAI(
                api_key=api_key,
                base_url=base_url,
                max_retries=max_retries,
                timeout=self.timeout,
                default_headers={"User-Agent": _user_agent()},
            )
        self.client = client

    def __repr__(self) -> str:  # never show the key
        return f"OpenAICompatAdapter(base_url={redact_url(self.base_url)!r})"

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self.client.close()

    def scrub(self, text: str) -> str:
        """``text`` with every occurrence of the API key replaced."""
        key = self._api_key
        return text.replace(key, REDACTED) if key and key in text else text

    def request_kwargs(self, request: LlmRequest) -> dict[str, object]:
        """The SDK ``chat.completions.create`` keyword arguments for ``request``."""
        return request_kwargs(request, self._extra_body)

    async def _pump(self, request: LlmRequest, emit: Callable[[StreamChunk], None]) -> None:
        """Open the SDK stream and translate it; runs as its own task so it can be cancelled."""
        translator = Translator(emit)
        # The SDK's AsyncStream; Any because its type needs the SDK's generics (and it is
        # read only through aiter/anext/close).
        stream: Any = None
        failure: LlmError | None = None
        idle = self.timeout
        try:
            kwargs: dict[str, Any] = self.request_kwargs(request)
            stream = await self.client.chat.completions.create(**kwargs)
            chunks = aiter(stream)
            while True:
                # The idle timer also catches a server that keeps the connection busy (SSE
                # comments, say) without sending a chunk, which the socket read timeout misses.
                try:
                    async with asyncio.timeout(idle):
                        chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    raise IdleTimeout from None
                translator.feed(chunk)
        except Exception as err:  # cancellation (a BaseException) propagates untouched
            failure = self._error(err, started=stream is not None)
        finally:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.close()
        if failure is not None:
            # Raised outside the handler so that it carries no __context__: the SDK's own
            # exception may quote the API key.
            raise failure
        translator.end()

    # ------------------------------------------------------------------ the adapter protocol

    def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        """Stream ``request``; ends with finish ``{kind:'aborted'}`` when its signal aborts."""
        return pumped(lambda emit: self._pump(request, emit), request.signal)


# --------------------------------------------------------------------------- plugin


def _config(config: object) -> Config:
    if isinstance(config, Config):
        return config
    return msgspec.convert(config or {}, Config)


def create_adapter(config: Config | Mapping[str, object] | None = None) -> OpenAICompatAdapter:
    """Build the adapter from plugin config (and the environment fallbacks)."""
    cfg = _config(config)
    return OpenAICompatAdapter(
        api_key=resolve_api_key(cfg),
        base_url=resolve_base_url(cfg),
        max_retries=cfg.max_retries,
        timeout_seconds=cfg.timeout_seconds,
        thinking=cfg.thinking,
        reasoning_effort=cfg.reasoning_effort,
        extra_body=cfg.extra_body,
    )


def apply(ctx: Context, config: Config | Mapping[str, object] | None = None) -> None:
    """Register the adapter for ``config.models``; unregistered and closed with the plugin."""
    cfg = _config(config)
    register_secret_env(cfg.api_key_env or KEY_ENV)  # never passed to commands the model runs
    adapter = create_adapter(cfg)
    ctx.defer(adapter.aclose)
    ctx.defer(ctx.require(LLM).register_adapter(cfg.models, adapter))
    if cfg.any_model:
        ctx.defer(ctx.require(LLM).set_fallback(adapter))
