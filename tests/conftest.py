"""Suite-wide settings."""

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# The agent loop's request/derive invariant check (a development check) is on in the test suite.
os.environ["DSH_DEV_CHECKS"] = "1"

# No test writes to the real ~/.local/share/dsh: sessions default to $DSH_HOME/sessions. A home
# for anything that runs outside a test (collection, module imports) ...
_HOME = tempfile.mkdtemp(prefix="dsh-test-home-")
os.environ["DSH_HOME"] = _HOME
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)


@pytest.fixture(autouse=True)
def _dsh_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """... and one empty home per test, inherited by every dsh it starts: a store-wide command
    (``dsh reminders run``, ``sessions list --all``) never sees another test's sessions."""
    home = tmp_path_factory.mktemp("dsh-home")
    monkeypatch.setenv("DSH_HOME", str(home))
    yield home
