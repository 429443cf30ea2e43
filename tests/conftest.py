"""Suite-wide settings."""

import asyncio
import atexit
import io
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.clock import T0, Clock, frozen_clock

if TYPE_CHECKING:
    from tests.support.rig import Rigs

# Some machines set PYTHONDONTWRITEBYTECODE: every test module would then be re-rewritten and every
# dsh the tests spawn (hundreds) would recompile dsh and its dependencies from source.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# The agent loop's request/derive invariant check (a development check) is on in the test suite.
os.environ["DSH_DEV_CHECKS"] = "1"

# No test writes to the real ~/.local/share/dsh: sessions default to $DSH_HOME/sessions. A home
# for anything that runs outside a test (collection, module imports) ...
_HOME = tempfile.mkdtemp(prefix="dsh-test-home-")
os.environ["DSH_HOME"] = _HOME
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)


@pytest.fixture
def clock_start() -> int:
    """Where the ``clock`` fixture starts, in epoch ms (a module overrides this fixture to move it)."""
    return T0


@pytest.fixture
def clock(clock_start: int, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """The suite's one controllable wall clock: frozen at ``clock_start``, process zone UTC,
    moved with ``clock.set(ms)`` / ``clock.advance(ms)`` (see ``tests/support/clock.py``)."""
    monkeypatch.setenv("TZ", "UTC")
    with frozen_clock(clock_start) as frozen:
        yield frozen


DISPOSE_LIMIT_S = 60


@pytest.fixture
async def rigs() -> AsyncIterator["Rigs"]:
    """``await rigs.make(...)`` builds a rig (``tests/support/rig.py``) disposed after the test."""
    from tests.support.rig import Rigs  # the agent spine is imported only by tests that use it

    made = Rigs()
    try:
        yield made
    finally:
        try:
            await asyncio.wait_for(made.dispose(), DISPOSE_LIMIT_S)
        except TimeoutError:
            # A hung dispose is a bug: name every task still pending instead of hanging the run.
            stacks = io.StringIO()
            for task in asyncio.all_tasks():
                task.print_stack(file=stacks)
            pytest.fail(f"dispose hung for {DISPOSE_LIMIT_S} s; pending tasks:\n{stacks.getvalue()}")


@pytest.fixture(autouse=True)
def _dsh_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """... and one empty home per test, inherited by every dsh it starts: a store-wide command
    (``dsh reminders run``, ``sessions list --all``) never sees another test's sessions."""
    home = tmp_path_factory.mktemp("dsh-home")
    monkeypatch.setenv("DSH_HOME", str(home))
    yield home


# Tiers. The default run (``uv run --group dev pytest``) is the fast tier. Tests marked with one
# of these run in ``.ci/run``'s second step (``-m "slow or pty or sigkill or perf"``), by
# ``--full``, or when named explicitly (``pytest tests/x.py::test_y``).
SECOND_TIER = ("slow", "pty", "sigkill", "perf")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true", help="run every tier (the default run skips "
                     + ", ".join(SECOND_TIER) + " tests)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--full") or config.option.markexpr or any("::" in a for a in config.args):
        return
    later = [any(item.get_closest_marker(m) for m in SECOND_TIER) for item in items]
    if any(later):
        config.hook.pytest_deselected(items=[item for item, skip in zip(items, later, strict=True) if skip])
        items[:] = [item for item, skip in zip(items, later, strict=True) if not skip]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A thread or child leaked by a failing test must not keep the process alive once the
    # verdict is in: give orderly shutdown two minutes, then leave with the verdict.
    def leave() -> None:
        os.write(2, b"pytest: shutdown hung for 120 s after the run; exiting\n")
        os._exit(int(exitstatus))

    timer = threading.Timer(120, leave)
    timer.daemon = True
    timer.start()
