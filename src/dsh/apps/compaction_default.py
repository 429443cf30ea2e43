"""Compaction in the default ``dsh chat``/``dsh run``/``dsh acp`` composition, and the
``--context-window`` / ``--max-steps`` flags.

The default composition mounts ``compact`` whenever the model's context window is known: from
``--context-window N``, else from the model catalog (:mod:`dsh.llm.catalog`). Without a known
window compaction stays off (a guessed window could be too large and overflow anyway), and
``/compact`` says why: :func:`off_reason`.
"""

from __future__ import annotations

import argparse
from typing import Final

from dsh.errors import UsageError
from dsh.runtime.loader import PluginEntry
from dsh.session.vocab import JsonObject

__all__ = ["COMPACT_NAMES", "add_arguments", "apply_flags", "default_entry", "off_reason"]

COMPACT_NAMES: Final = frozenset({"compact", "dsh.plugins.compact", "dsh.plugins.compact.plugin"})
_RETAIN: Final = 8000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--context-window", type=int, metavar="TOKENS",
        help="the model's context window, for compaction (default: the model catalog's; unknown: compaction off)",
    )
    parser.add_argument("--max-steps", type=int, metavar="N", help="at most N model steps per turn (default 64)")


def _positive(args: argparse.Namespace, name: str) -> int | None:
    value: int | None = getattr(args, name, None)
    if value is not None and value < 1:
        raise UsageError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    return value


def _known_window(model: str) -> int | None:
    from dsh.llm import catalog

    found = catalog.lookup(model)
    return found.context_window if found is not None else None


def default_entry(args: argparse.Namespace, model: str) -> PluginEntry | None:
    """The compaction entry of the default composition, or ``None`` (window unknown)."""
    window = _positive(args, "context_window")
    known = window if window is not None else _known_window(model)
    if known is None:
        return None
    config: JsonObject = {
        "thresholdRatio": 0.8,
        "retainTokens": min(_RETAIN, known // 4),
        "summarizationModel": "",
        "maxTokens": 4096,
        "compactionRetries": 1,
    }
    if window is not None:
        config["contextWindow"] = window  # else the catalog's, per model (also after /model)
    return PluginEntry(id="compact", name="compact", config=config)


def off_reason(model: str) -> str:
    return (
        f'compaction is off: the context window of model "{model}" is not known '
        "(pass --context-window TOKENS, or mount the compact plugin with contextWindow in a config)"
    )


def app_config(args: argparse.Namespace) -> JsonObject:
    """What ``--max-steps`` sets on the app entry."""
    steps = _positive(args, "max_steps")
    return {"maxStepsPerTurn": steps} if steps is not None else {}


def apply_flags(args: argparse.Namespace, entries: list[PluginEntry]) -> list[PluginEntry]:
    """``--context-window`` over a ``--config`` composition's compact entries (refused when it
    has none: a flag is never silently ignored)."""
    window = _positive(args, "context_window")
    if window is None:
        return entries
    found = [e for e in entries if e.name in COMPACT_NAMES and not e.disabled]
    if not found:
        raise UsageError("--context-window applies to the compact plugin, and this composition mounts none")
    return [
        PluginEntry(e.id, e.name, {**(e.config or {}), "contextWindow": window}, e.disabled, e.line)
        if e in found else e
        for e in entries
    ]
