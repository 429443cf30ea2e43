"""The ``subagent`` plugin's config through ``dsh chat --config``: ``maxDepth: 0`` forbids
delegation (the tool stays visible, the start is refused), and a misspelt key is one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.apps.conftest import run_dsh
from tests.llm.sse_server import Reply
from tests.plugins.subagent.support import (
    NO_PROXY,
    RoutedServer,
    call_reply,
    text_reply,
    tool_messages,
)

pytestmark = pytest.mark.slow


def _config(cwd: Path, url: str, sub: str) -> None:
    (cwd / "c.yml").write_text(
        f"- {{id: llm, name: openai-llm, config: {{baseURL: '{url}', models: [m], apiKey: none}}}}\n"
        f"- {{id: sub, name: subagent, config: {sub}}}\n"
        "- {id: app, name: stdio-app, config: {model: m, persistenceRoot: ./s}}\n"
    )


def _route(body: dict[str, Any]) -> Reply:
    done = tool_messages(body)
    if not done:
        return call_reply([("p-1", "subagent", {"description": "x", "prompt": "y"})])
    return text_reply(f"got: {done[-1]['content']}")


def test_max_depth_0_refuses_every_start(tmp_path: Path) -> None:
    cwd = tmp_path / "p"
    cwd.mkdir()
    with RoutedServer(_route) as server:
        _config(cwd, server.base_url, "{maxDepth: 0}")
        result = run_dsh(["chat", "--config", "c.yml"], cwd, stdin="go\n", HOME=str(tmp_path), **NO_PROXY)
        tools = [t["function"]["name"] for t in server.bodies()[0]["tools"]]
    assert result.returncode == 0, result.stderr
    assert tools == ["subagent"]
    assert "got: Error: subagent depth 1 exceeds maxDepth 0" in result.stdout
    stored = list((cwd / "s").rglob("*.jsonl"))
    assert len(stored) == 1  # no child session was created


def test_a_misspelt_key_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cwd = tmp_path / "p"
    cwd.mkdir()
    _config(cwd, "http://127.0.0.1:9", "{maxdepth: 2}")
    result = run_dsh(["chat", "--config", "c.yml"], cwd, stdin="", HOME=str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        'dsh: unknown key "maxdepth" in plugin "sub" (did you mean "maxDepth"?)'
    ]
