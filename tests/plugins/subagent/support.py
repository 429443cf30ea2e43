"""A loopback chat-completions model that tells parent from child requests by their system
prompt (a child's is its agent definition's body, or dsh's general-purpose child prompt), and
helpers to read the sessions ``dsh`` stored."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.apps.conftest import bucket, default_root
from tests.llm.sse_server import Reply, SSEServer, chunk

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
CHILD_MARK = "You are a subagent"

Route = Callable[[dict[str, Any]], Reply]


def call_reply(calls: list[tuple[str, str, dict[str, Any]]], *, first_delay: float = 0.0) -> Reply:
    """One assistant message calling ``(id, name, arguments)`` for each entry, in order."""
    return Reply.sse(
        [
            chunk(tool_calls=[
                {"index": i, "id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for i, (cid, name, args) in enumerate(calls)
            ]),
            chunk(finish="tool_calls"),
        ],
        first_delay=first_delay,
    )


def text_reply(text: str, *, first_delay: float = 0.0) -> Reply:
    return Reply.sse([chunk(content=text), chunk(finish="stop")], first_delay=first_delay)


def system_of(body: dict[str, Any]) -> str:
    for message in body.get("messages", []):
        if message.get("role") == "system":
            return str(message.get("content"))
    return ""


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body.get("messages", []) if m.get("role") == "tool"]


def first_user_text(body: dict[str, Any]) -> str:
    for message in body.get("messages", []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content)
    return ""


class RoutedServer(SSEServer):
    """Each request is answered by ``route(request_json)`` instead of a FIFO script."""

    def __init__(self, route: Route) -> None:
        super().__init__()
        self.route = route

    def _next(self) -> Reply:
        # The request being answered is the one just recorded (the server loop is one thread).
        return self.route(self.requests[-1].json)

    def bodies(self) -> list[dict[str, Any]]:
        return [r.json for r in self.requests]


def events_of(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = path.read_text().splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def stored_sessions(cwd: Path) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Every JSONL session of ``cwd`` in the default store, by id."""
    out = {}
    for path in sorted(bucket(default_root(), cwd).glob("*.jsonl")):
        header, events = events_of(path)
        out[header["id"]] = (header, events)
    return out


def split(sessions: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]) -> tuple[list[str], list[str]]:
    """(parent ids, child ids)."""
    parents = [sid for sid, (h, _) in sessions.items() if "parentSession" not in h]
    children = [sid for sid, (h, _) in sessions.items() if "parentSession" in h]
    return parents, children
