"""Suite-wide settings."""

import atexit
import os
import shutil
import tempfile

# The agent loop's request/derive invariant check (a development check) is on in the test suite.
os.environ["DSH_DEV_CHECKS"] = "1"

# No test writes to the real ~/.local/share/dsh: sessions default to $DSH_HOME/sessions, and every
# dsh started by a test (in process or as a subprocess) inherits this private home.
_HOME = tempfile.mkdtemp(prefix="dsh-test-home-")
os.environ["DSH_HOME"] = _HOME
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
