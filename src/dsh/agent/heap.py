"""Opt-in garbage-collector policy for long sessions (CPython): :class:`HistoryHeap`.

``gc.freeze`` is process-wide, so library code never calls it on its own: an application opts
in (the agent loop's ``freezeHistory`` config, which the CLI sets).
"""

from __future__ import annotations

import gc


class HistoryHeap:
    """Keeps full garbage collections from growing with the session (CPython).

    A live log is immutable and only grows, yet every full collection walks all of its dicts:
    at 100,000 events that is a 75 ms pause, and it recurs. When the live logs have doubled since
    the last time, collect once and freeze the survivors (``gc.freeze``), so later collections
    skip the history. The doubling makes the cost amortised constant per event. Frozen objects
    are still freed by reference counting; only cycles that were already garbage at a freeze
    would outlive it, and the full collection just before each freeze leaves none.
    """

    FIRST = 4096

    def __init__(self) -> None:
        self._next = self.FIRST

    def after_turn(self, live_events: int) -> None:
        if live_events >= self._next:
            gc.collect()
            gc.freeze()
            self._next = 2 * live_events
