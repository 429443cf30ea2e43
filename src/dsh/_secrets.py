"""The environment variables that hold this process's credentials (the model providers' API
keys), so that commands run on the model's behalf never inherit them.

Why a registry: which variable holds a key is the LLM plugin's config (``apiKeyEnv``), while the
shell's environment is built by the workspace tools; neither imports the other.
"""

from __future__ import annotations

__all__ = ["register_secret_env", "secret_env_names"]

_NAMES: set[str] = {"DEEPSEEK_API_KEY", "OPENAI_API_KEY"}


def register_secret_env(name: str) -> None:
    """Mark ``name`` as holding a credential of this process."""
    if name:
        _NAMES.add(name)


def secret_env_names() -> frozenset[str]:
    return frozenset(_NAMES)
