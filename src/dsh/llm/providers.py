"""``provider:model`` names: which adapter serves a model, at which endpoint, with which key.

Owns the provider table (:data:`PROVIDERS`) and :func:`resolve`, which turns a model name as the
user typed it (``--model``, ``/model``, a config's ``model``, ``dsh.Agent(model=...)``) into the
plugin entry config that serves it. ``anthropic:`` picks the ``anthropic-llm`` plugin; every
other provider picks ``openai-llm`` with its own default endpoint and key variable. The
endpoint is ``--base-url``, else the provider's own variable, else its default, in that order.

A name whose part before the first ``:`` is no known provider is a *bare* name and keeps its
historic meaning (``openai-llm`` with DeepSeek's defaults, or ``--base-url``), so Ollama tags
such as ``qwen3:8b`` still work bare. The full name (``anthropic:claude-…``) is what the log
records and the LLM service routes; adapters send :func:`wire_model` of it.

No SDK is imported here; :func:`resolve` raises :class:`~dsh.errors.UsageError` (one line
naming the variable to set or the extra to install) when a key or an extra is missing.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass

from dsh.errors import UsageError

__all__ = [
    "PROVIDERS",
    "Provider",
    "Resolved",
    "provider_of",
    "resolve",
    "split",
    "wire_model",
]


@dataclass(frozen=True, slots=True)
class Provider:
    """One provider: its adapter plugin, default endpoint and variables."""

    name: str
    plugin: str  # "openai-llm" or "anthropic-llm"
    default_url: str | None  # None: --base-url is required
    key_env: str | None  # None: no key needed
    url_env: str | None = None
    key_required: bool = True


PROVIDERS: Mapping[str, Provider] = {
    p.name: p
    for p in (
        Provider("anthropic", "anthropic-llm", "https://api.anthropic.com", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
        Provider("openai", "openai-llm", "https://api.openai.com/v1", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
        Provider("deepseek", "openai-llm", "https://api.deepseek.com", "DEEPSEEK_API_KEY", "DEEPSEEK_BASE_URL"),
        Provider("openrouter", "openai-llm", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
        Provider("ollama", "openai-llm", "http://127.0.0.1:11434/v1", None, "OLLAMA_HOST", key_required=False),
        # Any other chat-completions server: the key is optional (local servers take none).
        Provider("openai-compatible", "openai-llm", None, "OPENAI_API_KEY", key_required=False),
    )
}


def split(model: str) -> tuple[Provider | None, str]:
    """``(provider, wire name)`` of ``model``; ``(None, model)`` for a bare name."""
    head, sep, rest = model.partition(":")
    provider = PROVIDERS.get(head) if sep else None
    if provider is None or not rest:
        return None, model
    return provider, rest


def provider_of(model: str) -> Provider | None:
    return split(model)[0]


def wire_model(model: str) -> str:
    """The name the provider's API knows: ``model`` without a known ``provider:`` prefix."""
    return split(model)[1]


@dataclass(frozen=True, slots=True)
class Resolved:
    """Which plugin serves a provider-qualified model, and its entry config."""

    provider: Provider
    plugin: str
    config: dict[str, object]
    base_url: str


def _ollama_url(host: str) -> str:
    # OLLAMA_HOST is "host:port" or a URL (what the ollama CLI itself accepts); the
    # OpenAI-compatible API lives under /v1.
    url = host if "://" in host else f"http://{host}"
    url = url.rstrip("/")
    return url if url.endswith("/v1") else f"{url}/v1"


def endpoint(provider: Provider, base_url: str | None) -> str:
    """``--base-url``, else the provider's variable, else its default."""
    if base_url:
        return base_url
    from_env = os.environ.get(provider.url_env) if provider.url_env else None
    if from_env:
        return _ollama_url(from_env) if provider.name == "ollama" else from_env
    if provider.default_url is None:
        raise UsageError(f'"{provider.name}:" models need --base-url URL (the server that serves them)')
    return provider.default_url


def resolve(model: str, base_url: str | None = None) -> Resolved | None:
    """The plugin and config serving ``model``, or ``None`` for a bare name (today's rules)."""
    provider, _ = split(model)
    if provider is None:
        return None
    url = endpoint(provider, base_url)
    config: dict[str, object] = {"models": [model], "baseURL": url}
    if provider.key_env is not None and os.environ.get(provider.key_env):
        config["apiKeyEnv"] = provider.key_env
    elif provider.key_required:
        raise UsageError(f"{model} needs an API key: set {provider.key_env}")
    elif provider.plugin == "openai-llm":
        config["apiKey"] = "not-needed"  # local servers usually take no key
    if provider.plugin == "anthropic-llm" and importlib.util.find_spec("anthropic") is None:
        raise UsageError(
            f'{model} needs the optional extra dsh[anthropic], which is not installed '
            f'(pip install "dsh[anthropic]", or uv sync --extra anthropic)'
        )
    return Resolved(provider, provider.plugin, config, url)
