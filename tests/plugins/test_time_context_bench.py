"""Smoke test of ``bench/prestep_depth.py``: its synthetic logs are what it claims to measure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for ``bench``

from bench import prestep_depth

from dsh.plugins import time_context
from dsh.session import Session


@pytest.mark.parametrize("n", [5, 6, 11, 1_000, 1_003])
def test_synthetic_log_is_the_worst_case(n: int) -> None:
    events, turn = prestep_depth.synthetic_events(n)
    session = Session.restore("bench", events)
    assert len(session) == n
    assert session.open_turn == turn == session.last_turn
    assert session.events[-1].type == "step/end"
    assert not any(time_context.is_reading(e) for e in session.events)


async def test_measure_runs_and_every_firing_injects() -> None:
    measured = await prestep_depth._measure((1_000, 2_000), rounds=2, per_round=10)
    for median, first in measured.values():
        assert median > 0 and first > 0
