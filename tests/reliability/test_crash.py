"""Crash consistency: ``dsh chat`` killed with SIGKILL at seeded random moments, then resumed.

Each trial runs the real command on a composition of a slow scripted model (checkpointing the
session before every streamed delta and every step, so kills find open turns on disk), the
built-in ``echo`` tool, time-context and stdio-app; feeds it a line whenever a turn ends; stops
and kills it at ``kill_after`` seconds; then resumes through ``dsh chat --resume`` (one seed in
four) or the store API. See ``support.crash_trial`` and ``support.check_resumed`` for exactly what
must hold. ``python -m bench.soak`` runs the same trials 100 times per store.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from tests.reliability.support import Trial, run_trials

TRIALS = 20


def _report(trials: list[Trial]) -> str:
    states = collections.Counter(t.state for t in trials)
    failed = [t.describe() for t in trials if t.failures]
    return f"states: {dict(states)}\n" + "\n".join(failed)


@pytest.mark.sigkill
@pytest.mark.slow
@pytest.mark.parametrize("store", ["jsonl", "sqlite"])
def test_sigkill_at_random_moments_then_resume(store: str, tmp_path: Path) -> None:
    trials = run_trials(tmp_path, store, range(TRIALS), workers=3)
    assert len(trials) == TRIALS
    assert not [t for t in trials if t.failures], _report(trials)
    # Not vacuous: some kills cut a turn open on disk, and were repaired on resume. (Which
    # state each kill finds depends on timing; what must hold after it does not.)
    assert sum(1 for t in trials if t.closers) >= 3, _report(trials)
    assert {t.resume for t in trials} == {"cli", "store"}

