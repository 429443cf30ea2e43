"""Fixtures of the permission tests: the scripted model on loopback."""

from tests.mcp.conftest import sse_server  # noqa: F401
