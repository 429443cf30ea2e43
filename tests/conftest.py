"""Suite-wide settings."""

import os

# The agent loop's request/derive invariant check (a development check) is on in the test suite.
os.environ["DSH_DEV_CHECKS"] = "1"
