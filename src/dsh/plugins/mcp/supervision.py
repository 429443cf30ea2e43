"""The reconnect budget and the one-line wording of MCP failures.

Backoff: 500 ms doubling to 30 s between attempts, at most 10 consecutive failures, and the
budget resets once a connection has stayed up for 60 s. ``describe`` turns any exception the
SDK or a transport raises into one line with every configured secret scrubbed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx2
from mcp.shared.exceptions import MCPError

from dsh.plugins.mcp.config import SECRETS

__all__ = ["Backoff", "backoff_delay", "describe", "leaf", "seconds"]

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 30.0
MAX_FAILURES = 10
HEALTHY_AFTER_S = 60.0

def backoff_delay(failures: int) -> float:
    """Seconds to wait before attempt ``failures + 1``: 0.5, 1, 2, ... capped at 30."""
    return float(min(BACKOFF_START_S * 2 ** max(failures - 1, 0), BACKOFF_MAX_S))


class Backoff:
    """The reconnect budget: consecutive failures, reset after a healthy connection."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._since: float | None = None
        self.failures = 0

    def connected(self) -> None:
        self._since = self._clock()

    def lost(self) -> float | None:
        """Record a lost connection or failed attempt; the delay before the next attempt, or
        ``None`` once the budget is spent."""
        if self._since is not None and self._clock() - self._since >= HEALTHY_AFTER_S:
            self.failures = 0
        self._since = None
        self.failures += 1
        if self.failures > MAX_FAILURES:
            return None
        return backoff_delay(self.failures)


def leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    """One scrubbed line for an exception (the first leaf of an exception group)."""
    exc = leaf(exc)
    if isinstance(exc, MCPError):
        text = exc.message
    elif isinstance(exc, TimeoutError):
        text = str(exc) or "timed out"
    elif isinstance(exc, httpx2.ConnectError):
        text = "connection refused" if "refused" in str(exc).lower() else f"cannot connect: {exc}"
    elif isinstance(exc, FileNotFoundError):
        text = f"command not found: {exc.filename or exc}"
    else:
        text = str(exc) or type(exc).__name__
    return SECRETS.scrub(" ".join(text.split()))


def seconds(ms: int) -> str:
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms / 1000:g}s"
