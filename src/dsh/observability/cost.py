"""The money a model call cost, from its logged usage and the maintained ``genai-prices`` table.

Owns one question: given a model name (``model`` or ``provider:model``), the disjoint usage dsh
logs on ``assistant/message`` (``inputTokens`` excludes cache reads and writes) and when the
call was made, what did it cost in US dollars? ``None`` when the table does not know the model:
no cost is shown rather than a wrong one. Prices are looked up at the call's logged time, so a
session replayed a month later costs what it cost then (as far as the installed table knows).

``genai_prices`` is imported on the first lookup, never by ``import dsh``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from decimal import Decimal
from functools import lru_cache
from typing import Any

__all__ = ["call_cost", "call_cost_usd", "events_cost", "format_usd", "prewarm", "provider_of", "usage_cost"]

# gen_ai.provider.name when neither the name nor the price table says who serves a model.
OTHER_PROVIDER = "_OTHER"


def _split(model: str) -> tuple[str | None, str]:
    provider, sep, name = model.partition(":")
    return (provider, name) if sep and provider and name else (None, model)


@lru_cache(maxsize=256)
def provider_of(model: str) -> str:
    """``gen_ai.provider.name`` for a model: the ``provider:`` prefix, else the price table's
    provider for the name, else ``_OTHER``."""
    provider, name = _split(model)
    if provider is not None:
        return provider
    try:
        from genai_prices import data_snapshot

        return str(data_snapshot.get_snapshot().find_provider(name.lower(), None, None).id)
    except (LookupError, ImportError, AttributeError, TypeError):
        return OTHER_PROVIDER


_prewarmed = False


def prewarm() -> None:
    """Load the price table in a daemon thread (once), so the first priced line does not wait."""
    global _prewarmed
    if _prewarmed:
        return
    _prewarmed = True
    import threading

    threading.Thread(target=lambda: provider_of("gpt-4o"), name="dsh-prices", daemon=True).start()


def _int(usage: Mapping[str, object], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def call_cost(model: str, usage: Mapping[str, object], *, at_ms: int | None = None) -> Decimal | None:
    """The USD cost of one model call, or ``None`` for a model the price table does not know."""
    if not model or not _priced(model):
        return None
    return _cost(model, _int(usage, "inputTokens"), _int(usage, "outputTokens"),
                 _int(usage, "cacheReadTokens"), _int(usage, "cacheWriteTokens"), at_ms)


@lru_cache(maxsize=256)
def _priced(model: str) -> bool:
    """Whether the price table has the model at all (cached: the common unknown model, a
    local or mock one, then costs one dict lookup a call)."""
    try:
        from genai_prices import data_snapshot
    except ImportError:  # pragma: no cover - a declared dependency
        return False
    provider, name = _split(model)
    try:
        data_snapshot.get_snapshot().find_provider_model(name, None, provider, None)
    except LookupError:
        return False
    return True


@lru_cache(maxsize=4096)
def _cost(model: str, fresh: int, out: int, read: int, write: int, at_ms: int | None) -> Decimal | None:
    try:
        import genai_prices
    except ImportError:  # pragma: no cover - a declared dependency
        return None
    provider, name = _split(model)
    # genai-prices counts cache reads and writes inside input_tokens; dsh logs them apart.
    usage = genai_prices.Usage(
        input_tokens=fresh + read + write, output_tokens=out, cache_read_tokens=read, cache_write_tokens=write
    )
    when = None if at_ms is None else _dt.datetime.fromtimestamp(at_ms / 1000, _dt.UTC)
    try:
        price = genai_prices.calc_price(usage, name, provider_id=provider, genai_request_timestamp=when)
    except LookupError:
        return None
    return Decimal(price.total_price)


def call_cost_usd(model: str, usage: Mapping[str, object], *, at_ms: int | None = None) -> float | None:
    """:func:`call_cost` as a float (span attributes and metrics)."""
    cost = call_cost(model, usage, at_ms=at_ms)
    return None if cost is None else float(cost)


def usage_cost(calls: Iterable[tuple[str, Mapping[str, object], int | None]]) -> Decimal | None:
    """The summed cost of ``(model, usage, at_ms)`` calls; ``None`` when there are none or any
    one of them has no known price (a partial sum would understate it)."""
    total = Decimal(0)
    seen = False
    for model, usage, at_ms in calls:
        cost = call_cost(model, usage, at_ms=at_ms)
        if cost is None:
            return None
        total += cost
        seen = True
    return total if seen else None


def format_usd(cost: Decimal | float) -> str:
    """``$0.0123``: four decimals, more for fractions of a cent so a cheap call is not ``$0.0000``."""
    value = Decimal(str(cost)) if isinstance(cost, float) else cost
    if value != 0 and abs(value) < Decimal("0.0001"):
        return f"${value:.6f}"
    return f"${value:.4f}"


def events_cost(events: Iterable[Any], model: str | None = None) -> Decimal | None:
    """The cost of the model calls among log ``events`` (each ``assistant/message`` with usage,
    priced for the model of the ``request/header`` in force, ``model`` before the first one)."""
    calls: list[tuple[str, Mapping[str, object], int | None]] = []
    for event in events:
        data = event.data
        if event.type == "request/header":
            header = data.get("header") if isinstance(data, dict) else None
            config = header.get("config") if isinstance(header, dict) else None
            named = config.get("model") if isinstance(config, dict) else None
            model = named if isinstance(named, str) and named else model
        elif event.type == "assistant/message" and isinstance(data, dict) and isinstance(data.get("usage"), dict):
            calls.append((model or "", data["usage"], event.time))
    return usage_cost(calls)
