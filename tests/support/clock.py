"""The one controllable wall clock of the suite.

dsh reads the wall clock only through ``dsh._clock.now_ms`` (``time.time_ns()`` on every call),
so time-machine freezes and moves all of it. The ``clock`` fixture (``tests/conftest.py``)
freezes it at ``clock_start`` (default :data:`T0`) with the process zone UTC;
:func:`frozen_clock` does the same where a fixture cannot (a start per parametrized case, a log
built outside a test).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import time_machine

from dsh import _clock

T0 = 1_783_987_200_000  # 2026-07-14T00:00:00Z

# A fixed non-zero offset on purpose: time-machine sets ``TZ`` itself when handed a UTC or
# ZoneInfo datetime, and time-context resolves the process zone from ``TZ`` at load.
_PLAIN_OFFSET = timezone(timedelta(hours=1))


def at(ms: int) -> datetime:
    """An exact aware datetime for epoch milliseconds (a float would lose the last digit)."""
    return datetime.fromtimestamp(ms // 1000, _PLAIN_OFFSET).replace(microsecond=(ms % 1000) * 1000)


class Clock:
    """The frozen wall clock (time-machine, ``tick=False``), moved in milliseconds."""

    def __init__(self, traveller: time_machine.Traveller) -> None:
        self._traveller = traveller

    def set(self, ms: int) -> None:
        self._traveller.move_to(at(ms))

    def advance(self, ms: int) -> None:
        self._traveller.shift(ms / 1000)

    def now(self) -> int:
        """What dsh reads now, in epoch milliseconds."""
        return _clock.now_ms()


@contextmanager
def frozen_clock(start: int = T0) -> Iterator[Clock]:
    """Wall time frozen at ``start`` (epoch ms) until the block ends."""
    with time_machine.travel(at(start), tick=False) as traveller:
        yield Clock(traveller)
