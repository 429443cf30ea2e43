"""SIGKILL while a tool runs: the call survives on disk and repair closes it (issue 12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.slow_tool import slow_tool_trial

TRIALS = 2


@pytest.mark.sigkill
@pytest.mark.slow
@pytest.mark.parametrize("store", ["jsonl", "sqlite"])
def test_sigkill_during_a_slow_tool_then_continue(store: str, tmp_path: Path) -> None:
    for seed in range(TRIALS):
        trial = slow_tool_trial(tmp_path, store, seed)
        assert not trial.failures, trial.describe()
