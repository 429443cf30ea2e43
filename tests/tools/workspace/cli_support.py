"""Helpers for the workspace-tool tests that drive the real ``dsh`` command with a scripted model
on loopback: replies carrying tool calls, and the tool results of a session's log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.apps.conftest import session_files
from tests.llm.sse_server import Reply, chunk

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def calls(*items: tuple[str, dict[str, Any]], start: int = 1) -> Reply:
    """One model reply calling every ``(name, arguments)`` of ``items``, in order."""
    tool_calls = [
        {"index": i, "id": f"call_{start + i}", "type": "function",
         "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(items)
    ]
    return Reply.sse([chunk(tool_calls=tool_calls), chunk(finish="tool_calls")])


def done(text: str = "Done.") -> Reply:
    return Reply.sse([chunk(content=text), chunk(finish="stop")])


def model_args(base_url: str) -> list[str]:
    return ["--base-url", base_url, "--model", "test-model"]


def tool_results(cwd: Path) -> list[tuple[str, str, bool]]:
    """``(tool name, result text, isError)`` of every call in the one session of ``cwd``."""
    [log] = session_files(cwd)
    events = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    names = {e["data"]["callId"]: e["data"]["name"] for e in events if e["type"] == "tool/call"}
    return [
        (names[e["data"]["callId"]], "".join(b.get("text", "") for b in e["data"]["content"]), e["data"]["isError"])
        for e in events
        if e["type"] == "tool/result"
    ]
