"""A project for the permission-rule tests: a trusted ``.mcp.json`` whose server ``calc`` asks
for approval (the default), a scripted model on loopback, and ``dsh run`` in a subprocess with a
dsh home of its own."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.apps.conftest import run_dsh, session_files
from tests.llm.sse_server import SSEServer
from tests.mcp.conftest import NO_PROXY, stdio_server, write_mcp_json
from tests.tools.workspace.cli_support import calls, done

SEARCH = "mcp__calc__search"
PYTEST = "python -m pytest --version"


class Project:
    def __init__(self, tmp_path: Path, server: SSEServer) -> None:
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.cwd = (tmp_path / "project").resolve()
        self.cwd.mkdir()
        self.server = server
        write_mcp_json(self.cwd, {"calc": stdio_server("calc", tmp_path)}, trusted_in=self.home)
        # `python` is this test's interpreter, which has pytest.
        self.env = {"DSH_HOME": str(self.home), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                    **NO_PROXY}

    def run(
        self, *flags: str, commands: tuple[str, ...] = (PYTEST,), mcp: bool = True,
        sandbox: tuple[str, ...] = ("--sandbox", "danger-full-access"),
    ) -> Any:
        items: list[tuple[str, dict[str, Any]]] = []
        if mcp:
            items.append((SEARCH, {"q": "two plus two"}))
        items += [("bash", {"command": c, "description": "run"}) for c in commands]
        self.server.push(calls(*items), done())
        return run_dsh(
            ["run", "do the task", "--base-url", f"{self.server.base_url}/v1", "--model", "test-model",
             *sandbox, *flags],
            self.cwd, timeout=240, **self.env,
        )

    def newest(self) -> Path:
        logs = session_files(self.cwd, self.home / "sessions")
        return max(logs, key=lambda p: p.stat().st_mtime_ns)

    def show(self) -> str:
        """``dsh sessions show`` of the newest session."""
        session_id = json.loads(self.newest().read_text().splitlines()[0])["id"]
        shown = run_dsh(["sessions", "show", session_id], self.cwd, **self.env)
        assert shown.returncode == 0, shown.stderr
        return shown.stdout

    def events(self) -> list[dict[str, Any]]:
        """The events of the newest session of the project."""
        return [json.loads(line) for line in self.newest().read_text().splitlines()[1:]]

    def results(self) -> list[tuple[str, str, bool]]:
        events = self.events()
        names = {e["data"]["callId"]: e["data"]["name"] for e in events if e["type"] == "tool/call"}
        return [
            (names[e["data"]["callId"]], "".join(b.get("text", "") for b in e["data"]["content"]), e["data"]["isError"])
            for e in events
            if e["type"] == "tool/result"
        ]

    def decisions(self) -> list[dict[str, Any]]:
        return [e["data"] for e in self.events() if e["type"] == "approval/decided"]
