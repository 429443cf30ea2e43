"""What both HTTP plugins' configs share (:mod:`~dsh.llm.openai_config`,
:mod:`~dsh.llm.anthropic_config`).

Owns the 120 s idle-timeout default, the ``[redacted]`` marker, a config ``repr`` that never
shows the key, and the resolution of the API key (``apiKey``, else ``$<apiKeyEnv>``, else the
plugin's default variable) and of the base URL (``baseURL``, else the plugin's variable, else its
default). Each plugin's module names its own variables and defaults. Imports no SDK.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from dsh.llm.types import LlmError

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "REDACTED",
    "KeyConfig",
    "config_repr",
    "key_env",
    "resolve_api_key",
    "resolve_base_url",
]

# The longest wait for the response to start (per attempt) and between two chunks of it.
DEFAULT_TIMEOUT_SECONDS = 120.0
REDACTED = "[redacted]"


class KeyConfig(Protocol):
    """The config fields the key and base URL come from."""

    @property
    def api_key(self) -> str | None: ...
    @property
    def api_key_env(self) -> str | None: ...
    @property
    def base_url(self) -> str | None: ...


def config_repr(cfg: Any) -> str:
    """``Config(field=value, ...)`` of a msgspec config, the key shown as ``[redacted]``."""
    fields = ", ".join(
        f"{f}={REDACTED if f == 'api_key' and v else v!r}"
        for f in cfg.__struct_fields__
        for v in (getattr(cfg, f),)
    )
    return f"Config({fields})"


def key_env(cfg: KeyConfig, default: str) -> str:
    """The variable the key is read from (when ``apiKey`` is not set): ``apiKeyEnv``, else
    ``default``."""
    return cfg.api_key_env or default


def resolve_api_key(cfg: KeyConfig, default_env: str, plugin: str) -> str:
    """``apiKey``, else ``$<apiKeyEnv>`` (when set), else ``$<default_env>``; none of them:
    ``NO_API_KEY``, the message naming ``plugin`` and the variable."""
    if cfg.api_key:
        return cfg.api_key
    env = key_env(cfg, default_env)
    key = os.environ.get(env, "")
    if not key:
        raise LlmError(f"{plugin}: an API key is required (config apiKey or ${env})", code="NO_API_KEY")
    return key


def resolve_base_url(cfg: KeyConfig, env: str, default: str) -> str:
    """``baseURL``, else ``$<env>``, else ``default``."""
    return cfg.base_url or os.environ.get(env) or default
