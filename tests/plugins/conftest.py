"""Fixtures for the plugin tests: a frozen clock and an agent spine (see ``tc_support``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import time_machine
from tc_support import T0, Clock, Rig, at

from dsh.runtime import Context
from dsh.testing import mount_agent_loop


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """Wall time frozen at ``T0`` (2026-07-14T00:00:00Z), process zone UTC."""
    monkeypatch.setenv("TZ", "UTC")
    with time_machine.travel(at(T0), tick=False) as traveller:
        yield Clock(traveller)


@pytest.fixture
async def rig(clock: Clock) -> AsyncIterator[Rig]:
    ctx = Context()
    await mount_agent_loop(ctx)
    try:
        yield Rig(ctx, clock)
    finally:
        await ctx.dispose()
