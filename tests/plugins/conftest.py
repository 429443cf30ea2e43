"""Fixtures for the plugin tests: a rig with the agent spine for time-context (see ``tc_support``)."""

from __future__ import annotations

import pytest
from tc_support import TimeContextRig, tc_rig
from tests.support.clock import Clock
from tests.support.rig import Rigs


@pytest.fixture
async def rig(rigs: Rigs, clock: Clock) -> TimeContextRig:
    return await tc_rig(rigs, clock)
