"""The ``anthropic-llm`` plugin's config and its environment fallbacks.

Owns :class:`Config` (YAML keys in camelCase), the defaults (Anthropic's endpoint, the 120 s idle
timeout, the thinking budget) and which variables the API key and base URL are resolved from:
``apiKey``, else ``$<apiKeyEnv>``, else ``$ANTHROPIC_API_KEY``; ``baseURL``, else
``$ANTHROPIC_BASE_URL``, else ``https://api.anthropic.com`` (the rule is
:mod:`~dsh.llm._config_common`'s, shared with ``openai-llm``). It does not import the
``anthropic`` SDK.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from dsh.llm import _config_common as common
from dsh.llm._config_common import DEFAULT_TIMEOUT_SECONDS, REDACTED

__all__ = [
    "BASE_URL_ENV",
    "DEFAULT_BASE_URL",
    "DEFAULT_THINKING_BUDGET",
    "DEFAULT_TIMEOUT_SECONDS",
    "KEY_ENV",
    "MIN_THINKING_BUDGET",
    "REDACTED",
    "Config",
    "resolve_api_key",
    "resolve_base_url",
]

DEFAULT_BASE_URL = "https://api.anthropic.com"
KEY_ENV = "ANTHROPIC_API_KEY"
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
DEFAULT_THINKING_BUDGET = 8192
MIN_THINKING_BUDGET = 1024  # the API's minimum budget_tokens


class Config(
    msgspec.Struct,
    omit_defaults=True,
    rename={
        "api_key": "apiKey",
        "api_key_env": "apiKeyEnv",
        "base_url": "baseURL",
        "thinking_budget": "thinkingBudget",
        "max_tokens": "maxTokens",
        "max_retries": "maxRetries",
        "timeout_seconds": "timeoutSeconds",
        "prompt_cache": "promptCache",
    },
):
    """Plugin config. ``thinking`` unset: on for models the catalog says reason.
    ``maxTokens`` unset: the catalog's maximum output for the model."""

    api_key: str | None = None
    api_key_env: str | None = None
    base_url: str | None = None
    models: list[str] = msgspec.field(default_factory=list)
    thinking: Literal["enabled", "disabled"] | None = None
    thinking_budget: Annotated[int, msgspec.Meta(ge=MIN_THINKING_BUDGET)] = DEFAULT_THINKING_BUDGET
    max_tokens: Annotated[int, msgspec.Meta(gt=0)] | None = None
    max_retries: Annotated[int, msgspec.Meta(ge=0)] = 2
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0)] | None = None
    prompt_cache: bool = True

    def __repr__(self) -> str:  # the key must not reach logs through a config dump
        return common.config_repr(self)


def resolve_api_key(cfg: Config) -> str:
    """``apiKey``, else ``$<apiKeyEnv>`` (when set), else ``$ANTHROPIC_API_KEY``."""
    return common.resolve_api_key(cfg, KEY_ENV, "anthropic-llm")


def resolve_base_url(cfg: Config) -> str:
    """``baseURL``, else ``$ANTHROPIC_BASE_URL``, else ``https://api.anthropic.com``."""
    return common.resolve_base_url(cfg, BASE_URL_ENV, DEFAULT_BASE_URL)
