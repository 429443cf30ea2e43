"""The one wall clock of dsh.

Every wall-clock reading (event ``time`` stamps, session ``createdAt``, time-context's ``now``)
goes through :func:`now_ms`, which reads ``time.time_ns()`` on every call. Nothing caches a
reading, so tests can freeze and move time with ``time-machine``, which patches the C function
itself and so also the names bound to it.
"""

from __future__ import annotations

from time import time_ns


def now_ms() -> int:
    """Current wall-clock time in integer epoch milliseconds."""
    return time_ns() // 1_000_000
