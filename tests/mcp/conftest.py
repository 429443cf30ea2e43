"""Fixtures for the MCP tests: real servers (stdio and streamable HTTP) built on the SDK.

The stdio server is spawned by dsh itself from a ``.mcp.json``; the HTTP server is started
here as a subprocess on a free 127.0.0.1 port. ``sse_server`` (the scripted model) comes from
``tests/llm``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

_LLM = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM not in sys.path:
    sys.path.insert(0, _LLM)

from sse_server import SSEServer  # noqa: E402

from tests.support.wait import wait_until_sync  # noqa: E402

SERVER = Path(__file__).with_name("mcp_test_server.py")
TOKEN = "tok-SECRET-e2e-5f3a9c"
NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


@pytest.fixture
def sse_server() -> Iterator[SSEServer]:
    with SSEServer() as server:
        yield server


def stdio_server(tag: str, tmp: Path, **extra: Any) -> dict[str, Any]:
    """A ``.mcp.json`` entry running the test server over stdio."""
    env = {"MCP_TAG": tag, "MCP_PIDFILE": str(tmp / f"{tag}.pids"), "MCP_MARKER": str(tmp / f"{tag}.marker")}
    env.update(extra.pop("env", {}))
    # A loaded machine (the whole suite on 2 cores) can take far longer than 30 s to start one.
    return {"command": sys.executable, "args": [str(SERVER)], "env": env, "startupTimeoutMs": 180_000, **extra}


def write_mcp_json(folder: Path, servers: dict[str, Any], *, trusted_in: Path | None = None) -> Path:
    """Write ``folder/.mcp.json``; ``trusted_in`` (a dsh home) also records the user's trust in
    it there, through the trust API, as ``dsh trust --yes`` would."""
    path = folder / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}, indent=2))
    if trusted_in is not None:
        trust_project(folder, trusted_in)
    return path


def trust_project(folder: Path, home: Path) -> None:
    """Trust the project files of ``folder`` in the dsh home ``home``."""
    from dsh import trust
    from dsh.plugins.mcp.mcp_json import KIND

    trust.trust(trust.project_files(folder, [KIND]), trust.TrustStore(home / "trust.json"))


def pids(pidfile: Path) -> list[tuple[int, int]]:
    """``(server pid, guard pid)`` per start recorded in ``pidfile``."""
    if not pidfile.exists():
        return []
    return [tuple(int(x) for x in line.split()) for line in pidfile.read_text().splitlines() if line]  # type: ignore[misc]


def wait_for(predicate: Callable[[], object], timeout: float = 60, what: str = "condition") -> None:
    wait_until_sync(predicate, timeout, what)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    def __init__(self, tag: str, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        env = {**os.environ, "MCP_TAG": tag, "MCP_PIDFILE": str(tmp / f"{tag}.pids")}
        env.pop("TOKEN", None)
        self.log = open(tmp / f"{tag}.http.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--http", str(self.port)],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        wait_for(self._up, 180, f"the HTTP MCP server on port {self.port}")

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"HTTP MCP server exited {self.proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[Callable[[str], HttpServer]]:
    started: list[HttpServer] = []

    def start(tag: str) -> HttpServer:
        server = HttpServer(tag, tmp_path)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    cwd = tmp_path / "project"
    cwd.mkdir()
    return cwd
