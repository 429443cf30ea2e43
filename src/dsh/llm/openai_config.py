"""The ``openai-llm`` plugin's config and its environment fallbacks.

Owns :class:`Config` (YAML keys in camelCase), the defaults (DeepSeek's base URL and models, the
120 s idle timeout) and which variables the API key and base URL are resolved from (the rule is
:mod:`~dsh.llm._config_common`'s, shared with ``anthropic-llm``). It does not import the
``openai`` SDK, so the CLI can read :data:`DEFAULT_MODELS` without paying for it.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from dsh.llm import _config_common as common
from dsh.llm._config_common import DEFAULT_TIMEOUT_SECONDS, REDACTED

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
        return common.config_repr(self)


def resolve_api_key(cfg: Config) -> str:
    """``apiKey``, else ``$<apiKeyEnv>`` (when set), else ``$DEEPSEEK_API_KEY``."""
    return common.resolve_api_key(cfg, KEY_ENV, "openai-llm")


def resolve_base_url(cfg: Config) -> str:
    """``baseURL``, else ``$DEEPSEEK_BASE_URL``, else ``https://api.deepseek.com``."""
    return common.resolve_base_url(cfg, BASE_URL_ENV, DEFAULT_BASE_URL)
