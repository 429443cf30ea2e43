"""A subagent's child session (``parentSession``) traces as child spans of the tool call that ran
it, live and replayed alike."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.apps.conftest import run_dsh, session_files
from tests.llm.sse_server import Reply, SSEServer, chunk
from tests.observability.otlp_receiver import OtlpReceiver, Span

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
CONFIG = """\
- id: model
  name: openai-llm
  config: {{baseURL: "{url}", apiKey: k, models: [gpt-4o]}}
- id: tc
  name: time-context
- id: delegate
  name: ./delegate_plugin.py
- id: app
  name: stdio-app
  config: {{model: gpt-4o}}
"""


def tree(spans: list[Span]) -> list[tuple[Any, ...]]:
    by_id = {s.span_id: s for s in spans}
    return sorted((s.name, by_id[s.parent_id].name if s.parent_id else None, s.start_ns, s.end_ns,
                   json.dumps(s.attributes, sort_keys=True)) for s in spans)


def json_spans(text: str) -> list[dict[str, Any]]:
    body = json.loads(text)
    return [s for rs in body["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


@pytest.mark.slow
def test_a_child_session_hangs_under_the_tool_call_that_ran_it(workdir: Path) -> None:
    shutil.copy(Path(__file__).with_name("delegate_plugin.py"), workdir / "delegate_plugin.py")
    with SSEServer() as server, OtlpReceiver() as receiver:
        (workdir / "c.yml").write_text(CONFIG.format(url=server.base_url))
        server.push(
            Reply.sse([chunk(role="assistant", tool_calls=[{"index": 0, "id": "call_d", "type": "function",
                       "function": {"name": "delegate", "arguments": '{"prompt":"sub task"}'}}]), chunk(finish="tool_calls")]),
            Reply.sse([chunk(content="sub done"), chunk(finish="stop")]),
            Reply.sse([chunk(content="All done"), chunk(finish="stop")]),
        )
        result = run_dsh(["run", "go", "--config", "c.yml"], workdir, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, **NO_PROXY)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "All done\n"
        live = receiver.wait_for(6)
    assert len(live) == 6
    by_id = {s.span_id: s for s in live}
    [tool] = [s for s in live if s.name == "execute_tool delegate"]
    [child_turn] = [s for s in live if s.name == "invoke_agent sub1"]
    [child_chat] = [s for s in live if s.parent_id == child_turn.span_id]
    assert child_turn.parent_id == tool.span_id and child_turn.trace_id == tool.trace_id
    assert by_id[tool.parent_id].name == "invoke_agent main"
    assert child_chat.name == "chat gpt-4o"
    assert child_turn.attributes["gen_ai.conversation.id"].startswith("sub1-session-")
    assert tool.start_ns <= child_turn.start_ns <= child_turn.end_ns <= tool.end_ns

    # Replay of the parent session brings its child along, in the same place.
    parent_log = next(p for p in session_files(workdir) if p.stem.startswith("main-session-"))
    with OtlpReceiver() as receiver:
        replayed = run_dsh(["sessions", "trace", parent_log.stem, "--otlp", receiver.url], workdir, **NO_PROXY)
        assert replayed.returncode == 0, replayed.stderr
        again = receiver.wait_for(6)
    assert tree(again) == tree(live)
