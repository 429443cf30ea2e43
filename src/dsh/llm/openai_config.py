"""The ``openai-llm`` plugin's config and its environment fallbacks.

Owns :class:`Config` (YAML keys in camelCase), the defaults (DeepSeek's base URL and models, the
120 s idle timeout) and how the API key and base URL are resolved. It does not import the
``openai`` SDK, so the CLI can read :data:`DEFAULT_MODELS` without paying for it.
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

import msgspec

from dsh.llm.types import LlmError

__all__ = [
    "BASE_URL_ENV",
    "DEFAULT_BASE_URL",
    "DEFAULT_MODELS",
    "DEFAULT_TIMEOUT_SECONDS",
    "KEY_ENV",
    "REDACTED",
    "Config",
    "resolve_api_key",
    "resolve_base_url",
]

DEFAULT_BASE_URL = "https://api.deepseek.com"
DEFAULT_MODELS = ("deepseek-v4-flash", "deepseek-v4-pro")
KEY_ENV = "DEEPSEEK_API_KEY"
BASE_URL_ENV = "DEEPSEEK_BASE_URL"
# The longest wait for the response to start (per attempt) and between two chunks of it.
DEFAULT_TIMEOUT_SECONDS = 120.0
REDACTED = "[redacted]"


class Config(
    msgspec.Struct,
    omit_defaults=True,
    rename={
        "api_key": "apiKey",
        "api_key_env": "apiKeyEnv",
        "base_url": "baseURL",
        "reasoning_effort": "reasoningEffort",
        "max_retries": "maxRetries",
        "timeout_seconds": "timeoutSeconds",
        "extra_body": "extraBody",
        "any_model": "anyModel",
    },
):
    """Plugin config (YAML keys in camelCase; ``baseURL`` as spelled by the reference)."""

    api_key: str | None = None
    api_key_env: str | None = None
    base_url: str | None = None
    models: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_MODELS))
    thinking: Literal["enabled", "disabled"] | None = None
    reasoning_effort: str | None = None
    max_retries: Annotated[int, msgspec.Meta(ge=0)] = 2
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0)] | None = None
    extra_body: dict[str, object] | None = None
    # Also serve any other model name (the endpoint says when it does not know one): what an
    # OpenAI-compatible server or the DeepSeek endpoint named on the command line is.
    any_model: bool = False

    def __repr__(self) -> str:  # the key must not reach logs through a config dump
        fields = ", ".join(
            f"{f}={REDACTED if f == 'api_key' and v else v!r}"
            for f in self.__struct_fields__
            for v in (getattr(self, f),)
        )
        return f"Config({fields})"


def resolve_api_key(cfg: Config) -> str:
    """``apiKey``, else ``$<apiKeyEnv>`` (when set), else ``$DEEPSEEK_API_KEY``."""
    if cfg.api_key:
        return cfg.api_key
    env = cfg.api_key_env or KEY_ENV
    key = os.environ.get(env, "")
    if not key:
        raise LlmError(
            f"openai-llm: an API key is required (config apiKey or ${env})", code="NO_API_KEY"
        )
    return key


def resolve_base_url(cfg: Config) -> str:
    """``baseURL``, else ``$DEEPSEEK_BASE_URL``, else ``https://api.deepseek.com``."""
    return cfg.base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
