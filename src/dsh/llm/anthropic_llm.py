"""Anthropic's Messages API, natively, as the ``anthropic-llm`` plugin.

Owns :class:`AnthropicAdapter` (the official ``anthropic`` SDK's ``AsyncAnthropic`` as transport:
its HTTP client, SSE decoding, retries and error types) and the plugin (``name``, ``inject``,
``apply``); the pump, idle timeout and key scrubbing around the SDK call are
:class:`~dsh.llm._adapter.SdkAdapter`'s, shared with ``openai-llm``. The mappings live beside
it: :mod:`~dsh.llm.anthropic_config` (config, key and URL), :mod:`~dsh.llm.anthropic_request`
(request → wire, the cache rule), :mod:`~dsh.llm.anthropic_stream` (events → dsh chunks) and
:mod:`~dsh.llm.anthropic_errors`.

Behaves as ``openai-llm`` does: retries (``maxRetries``, default 2) are the SDK's and only
before output begins; ``timeoutSeconds`` (120) is an idle timeout; an aborted signal closes the
stream and ends with finish ``{kind:'aborted'}``; the key variable (``apiKeyEnv``, else
``ANTHROPIC_API_KEY``) is kept out of the environment of the commands the model runs.
``max_tokens`` (which the API requires) is the request's, else ``maxTokens``, else the catalog's
maximum output for the model. Thinking is on for models the catalog marks as reasoning unless
``thinking: disabled``.

The SDK is an optional extra (``dsh[anthropic]``): importing this module without it raises
:class:`~dsh._extras.MissingExtra`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dsh._extras import missing_extra
from dsh._redact import redact_url
from dsh._secrets import register_secret_env
from dsh.llm import catalog
from dsh.llm._adapter import SdkAdapter, mount, plugin_config
from dsh.llm._config_common import key_env
from dsh.llm.anthropic_config import (
    KEY_ENV,
    MIN_THINKING_BUDGET,
    Config,
    resolve_api_key,
    resolve_base_url,
)
from dsh.llm.anthropic_request import request_params
from dsh.llm.anthropic_stream import Translator
from dsh.llm.types import LlmError, LlmRequest, StreamChunk

try:
    import anthropic

    from dsh.llm.anthropic_errors import ErrorMapper
except ModuleNotFoundError as exc:  # the optional extra is not installed
    extra = missing_extra("the anthropic-llm plugin", exc)
    if extra is None:
        raise
    raise extra from None

if TYPE_CHECKING:
    from dsh.runtime import Context

__all__ = ["AnthropicAdapter", "Config", "apply", "create_adapter", "inject", "name"]

name = "anthropic-llm"
inject = ["llm"]


class AnthropicAdapter(SdkAdapter[Translator]):
    """Streams Messages API replies through ``AsyncAnthropic``."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        max_retries: int = 2,
        timeout_seconds: float | None = None,
        thinking: str | None = None,
        thinking_budget: int = 8192,
        max_tokens: int | None = None,
        prompt_cache: bool = True,
    ) -> None:
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            max_retries=max_retries,
            timeout_seconds=timeout_seconds,
            errors=ErrorMapper,
        )
        self.thinking = thinking
        self.thinking_budget = thinking_budget
        self.max_tokens = max_tokens
        self.prompt_cache = prompt_cache
        self.client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=self.timeout
        )

    def __repr__(self) -> str:  # never show the key
        return f"AnthropicAdapter(base_url={redact_url(self.base_url)!r})"

    async def aclose(self) -> None:
        await self.client.close()

    def request_kwargs(self, request: LlmRequest) -> dict[str, object]:
        """The SDK ``messages.create`` keyword arguments for ``request``."""
        model = catalog.info(request.model)
        max_tokens = request.max_tokens or self.max_tokens or model.max_output
        wants = self.thinking == "enabled" or (self.thinking is None and model.reasoning)
        budget = min(self.thinking_budget, max_tokens - 1)
        thinking = budget if wants and budget >= MIN_THINKING_BUDGET else None
        return request_params(request, max_tokens=max_tokens, thinking_budget=thinking, cache=self.prompt_cache)

    def _translator(self, emit: Callable[[StreamChunk], None]) -> Translator:
        return Translator(emit)

    async def _open(self, request: LlmRequest) -> Any:
        kwargs: dict[str, Any] = self.request_kwargs(request)
        return await self.client.messages.create(**kwargs)

    def _check(self, translator: Translator) -> None:
        if not translator.stopped:
            raise LlmError("the model stream was cut off before it finished", code="STREAM_CLOSED")


# --------------------------------------------------------------------------- plugin


def _config(config: object) -> Config:
    return plugin_config(config, Config)


def create_adapter(config: Config | Mapping[str, object] | None = None) -> AnthropicAdapter:
    cfg = _config(config)
    return AnthropicAdapter(
        api_key=resolve_api_key(cfg),
        base_url=resolve_base_url(cfg),
        max_retries=cfg.max_retries,
        timeout_seconds=cfg.timeout_seconds,
        thinking=cfg.thinking,
        thinking_budget=cfg.thinking_budget,
        max_tokens=cfg.max_tokens,
        prompt_cache=cfg.prompt_cache,
    )


def apply(ctx: Context, config: Config | Mapping[str, object] | None = None) -> None:
    """Register the adapter for ``config.models``; unregistered and closed with the plugin."""
    cfg = _config(config)
    register_secret_env(key_env(cfg, KEY_ENV))  # never passed to commands the model runs
    mount(ctx, cfg.models, create_adapter(cfg))
