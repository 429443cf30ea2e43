"""The model catalog: context window, maximum output and reasoning per model.

Owns the typed view of ``catalog.toml`` (the one data file to edit when a model changes):
:class:`ModelInfo`, :func:`lookup` (``None`` for a model the catalog lacks), :func:`info` (the
entry, or the ``[defaults]`` with ``known=False``) and :func:`names` (for ``/model``
completion). Prices are not the catalog's: cost comes from the maintained ``genai-prices`` table
(:mod:`dsh.observability.cost`), the one source of prices. The file is parsed on first use,
never at ``import dsh``.

Names are looked up as typed (``anthropic:claude-sonnet-4-5``); a bare or
``openai-compatible:`` name matches the one entry whose model part it equals
(``deepseek-v4-flash`` → ``deepseek:deepseek-v4-flash``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

__all__ = ["ModelInfo", "info", "lookup", "names", "unknown_note"]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One catalog entry (prices are not the catalog's: see :mod:`dsh.observability.cost`)."""

    name: str
    context_window: int
    max_output: int
    reasoning: bool
    known: bool = True


def _entry(name: str, raw: Mapping[str, object], known: bool = True) -> ModelInfo:
    return ModelInfo(
        name=name,
        context_window=int(raw["context_window"]),  # type: ignore[call-overload]
        max_output=int(raw["max_output"]),  # type: ignore[call-overload]
        reasoning=bool(raw.get("reasoning", False)),
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
    """The one line that says which defaults an unknown model runs with (``None`` if known, and
    for the keyless ``mock-echo``, which calls no endpoint: a newcomer's first screen stays clean)."""
    from dsh.llm.echo import MODEL as ECHO_MODEL

    if model == ECHO_MODEL or lookup(model) is not None:
        return None
    d = info(model)
    return (
        f"{model} is not in dsh's model catalog: assuming a {d.context_window}-token context "
        f"window and {d.max_output} output tokens"
    )


def names() -> list[str]:
    """Every catalog model name, in file order."""
    return list(_load()[0])
