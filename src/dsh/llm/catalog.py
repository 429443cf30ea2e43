"""The model catalog: context window, maximum output, reasoning and prices per model.

Owns the typed view of ``catalog.toml`` (the one data file to edit when a model or a price
changes): :class:`ModelInfo`, :func:`lookup` (``None`` for a model the catalog lacks),
:func:`info` (the entry, or the ``[defaults]`` with ``known=False``), :func:`names` (for
``/model`` completion) and :func:`cost` (USD of a logged usage, for cost reporting). The file is
parsed on first use, never at ``import dsh``.

Names are looked up as typed (``anthropic:claude-sonnet-4-5``); a bare or
``openai-compatible:`` name matches the one entry whose model part it equals
(``deepseek-v4-flash`` → ``deepseek:deepseek-v4-flash``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

__all__ = ["ModelInfo", "cost", "info", "lookup", "names", "unknown_note"]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One catalog entry. Prices are USD per million tokens (``None``: not known)."""

    name: str
    context_window: int
    max_output: int
    reasoning: bool
    input: float | None = None
    output: float | None = None
    cache_read: float | None = None
    cache_write: float | None = None
    known: bool = True


def _entry(name: str, raw: Mapping[str, object], known: bool = True) -> ModelInfo:
    def price(key: str) -> float | None:
        value = raw.get(key)
        return float(value) if isinstance(value, int | float) else None

    return ModelInfo(
        name=name,
        context_window=int(raw["context_window"]),  # type: ignore[call-overload]
        max_output=int(raw["max_output"]),  # type: ignore[call-overload]
        reasoning=bool(raw.get("reasoning", False)),
        input=price("input"),
        output=price("output"),
        cache_read=price("cache_read"),
        cache_write=price("cache_write"),
        known=known,
    )


@functools.cache
def _load() -> tuple[dict[str, ModelInfo], ModelInfo]:
    import tomllib  # parsed once, on first use

    text = resources.files("dsh.llm").joinpath("catalog.toml").read_text(encoding="utf-8")
    raw = tomllib.loads(text)
    defaults = raw.pop("defaults")
    entries = {name: _entry(name, table) for name, table in raw.items()}
    return entries, _entry("", defaults, known=False)


def _model_part(name: str) -> str:
    from dsh.llm.providers import split

    return split(name)[1]


def lookup(model: str) -> ModelInfo | None:
    """The catalog entry of ``model``, or ``None``."""
    entries, _ = _load()
    found = entries.get(model)
    if found is not None:
        return found
    from dsh.llm.providers import provider_of

    provider = provider_of(model)
    if provider is not None and provider.name != "openai-compatible":
        return None
    part = _model_part(model)
    matches = [e for n, e in entries.items() if _model_part(n) == part]
    return matches[0] if len(matches) == 1 else None


def info(model: str) -> ModelInfo:
    """``lookup(model)``, or the catalog's defaults (``known=False``) under ``model``'s name."""
    found = lookup(model)
    if found is not None:
        return found
    _, defaults = _load()
    return ModelInfo(
        model, defaults.context_window, defaults.max_output, defaults.reasoning, known=False
    )


def unknown_note(model: str) -> str | None:
    """The one line that says which defaults an unknown model runs with (``None`` if known)."""
    if lookup(model) is not None:
        return None
    d = info(model)
    return (
        f"{model} is not in dsh's model catalog: assuming a {d.context_window}-token context "
        f"window and {d.max_output} output tokens, no prices"
    )


def names() -> list[str]:
    """Every catalog model name, in file order."""
    return list(_load()[0])


def cost(model: str, usage: Mapping[str, object]) -> float | None:
    """USD of one logged usage (disjoint ``inputTokens``/``cacheReadTokens``/
    ``cacheWriteTokens``/``outputTokens``), or ``None`` when a needed price is unknown."""
    entry = lookup(model)
    if entry is None or entry.input is None or entry.output is None:
        return None

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) else 0

    read = entry.cache_read if entry.cache_read is not None else entry.input
    write = entry.cache_write if entry.cache_write is not None else entry.input
    total = (
        count("inputTokens") * entry.input
        + count("outputTokens") * entry.output
        + count("cacheReadTokens") * read
        + count("cacheWriteTokens") * write
    )
    return total / 1_000_000
