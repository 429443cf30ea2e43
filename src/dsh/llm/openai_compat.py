"""DeepSeek and any OpenAI-compatible chat-completions endpoint, as the ``openai-llm`` plugin.

Owns :class:`OpenAICompatAdapter` (the transport, its timeouts and cancellation) and the plugin
(``name``, ``inject``, ``apply``). Transport is the official ``openai`` SDK's ``AsyncOpenAI``
(its HTTP client, SSE decoding, retries, timeouts and error types); the pump, idle timeout and
key scrubbing around it are :class:`~dsh.llm._adapter.SdkAdapter`'s, shared with
``anthropic-llm``. The mappings live next to it (docs/llm.md): :mod:`~dsh.llm.openai_config`
(config, key and URL resolution), :mod:`~dsh.llm.openai_request` (request → wire),
:mod:`~dsh.llm.openai_stream` (wire chunks → dsh chunks) and :mod:`~dsh.llm.openai_errors`
(failures → :class:`~dsh.llm.types.LlmError`); their public names are re-exported here.

Retries (``maxRetries``, default 2) are the SDK's and only happen before the response starts;
nothing is retried once output has begun. ``timeoutSeconds`` (default 120) bounds each attempt's
wait for the response to start and every wait for the next chunk (an idle timeout, not a limit
on the whole reply); when it runs out the request fails with code ``TIMEOUT``. An aborted
``request.signal`` cancels the task that reads the HTTP stream, which closes the stream, and the
iterator ends with finish ``{kind:'aborted'}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version
from typing import TYPE_CHECKING, Any, Literal

import openai

from dsh._redact import redact_url
from dsh._secrets import register_secret_env
from dsh.llm._adapter import SdkAdapter, mount, plugin_config
from dsh.llm._config_common import key_env
from dsh.llm.openai_config import (
    DEFAULT_BASE_URL,
    DEFAULT_MODELS,
    DEFAULT_TIMEOUT_SECONDS,
    KEY_ENV,
    Config,
    resolve_api_key,
    resolve_base_url,
)
from dsh.llm.openai_errors import ErrorMapper
from dsh.llm.openai_request import build_messages, build_tools, request_kwargs
from dsh.llm.openai_stream import Translator, map_finish_reason, map_usage
from dsh.llm.service import LLM
from dsh.llm.types import LlmRequest, StreamChunk

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


class OpenAICompatAdapter(SdkAdapter[Translator]):
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
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            max_retries=max_retries,
            timeout_seconds=timeout_seconds,
            errors=ErrorMapper,
        )
        self._extra_body: dict[str, object] = {}
        if thinking is not None:
            self._extra_body["thinking"] = {"type": thinking}
        if reasoning_effort is not None:
            self._extra_body["reasoning_effort"] = reasoning_effort
        if extra_body:
            self._extra_body.update(extra_body)
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

    def request_kwargs(self, request: LlmRequest) -> dict[str, object]:
        """The SDK ``chat.completions.create`` keyword arguments for ``request``."""
        return request_kwargs(request, self._extra_body)

    def _translator(self, emit: Callable[[StreamChunk], None]) -> Translator:
        return Translator(emit)

    async def _open(self, request: LlmRequest) -> Any:
        kwargs: dict[str, Any] = self.request_kwargs(request)
        return await self.client.chat.completions.create(**kwargs)


# --------------------------------------------------------------------------- plugin


def _config(config: object) -> Config:
    return plugin_config(config, Config)


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
    register_secret_env(key_env(cfg, KEY_ENV))  # never passed to commands the model runs
    adapter = create_adapter(cfg)
    mount(ctx, cfg.models, adapter)
    if cfg.any_model:
        ctx.defer(ctx.require(LLM).set_fallback(adapter))
