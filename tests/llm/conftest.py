"""Fixtures for the LLM tests: a loopback chat-completions SSE server per test.

The test modules import the server helpers as ``sse_server``; this directory is put on
``sys.path`` here so that keeps working whatever import mode or package layout pytest uses.
Other test packages can reuse it the same way (or as ``tests.llm.sse_server``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

if TYPE_CHECKING:
    from sse_server import SSEServer


@pytest.fixture
def sse_server() -> Iterator[SSEServer]:
    from sse_server import SSEServer

    with SSEServer() as server:
        yield server
