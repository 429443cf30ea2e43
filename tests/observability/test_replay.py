"""``dsh sessions trace ID --json``: any stored session, including one the reference harness
wrote and ``dsh sessions import`` brought in, replayed into GenAI spans with the log's times;
approvals and compaction as spans; message contents only on request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.apps.conftest import run_dsh, session_files
from tests.llm.sse_server import Reply, SSEServer, chunk

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dsh-v0" / "compaction-replace.jsonl"
NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def spans_of(stdout: str) -> list[dict[str, Any]]:
    body = json.loads(stdout)
    return [s for rs in body["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def attrs(span: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for a in span.get("attributes", []):
        value = a["value"]
        (kind, v), = value.items()
        out[a["key"]] = [next(iter(x.values())) for x in v.get("values", [])] if kind == "arrayValue" else v
    return out


def test_a_reference_harness_session_replays_with_its_own_timestamps(workdir: Path) -> None:
    imported = run_dsh(["sessions", "import", str(FIXTURE)], workdir)
    assert imported.returncode == 0, imported.stderr
    result = run_dsh(["sessions", "trace", "compaction-replace", "--json"], workdir)
    assert result.returncode == 0, result.stderr
    spans = spans_of(result.stdout)
    events = [json.loads(line) for line in FIXTURE.read_text().splitlines()[1:]]
    turns = sorted((s for s in spans if s["name"] == "invoke_agent dsh"), key=lambda s: int(s["startTimeUnixNano"]))
    starts = [e["time"] * 1_000_000 for e in events if e["type"] == "turn/start"]
    ends = [e["time"] * 1_000_000 for e in events if e["type"] == "turn/end"]
    assert [int(s["startTimeUnixNano"]) for s in turns] == starts
    assert [int(s["endTimeUnixNano"]) for s in turns] == ends
    by_id = {s["spanId"]: s for s in spans}
    [compaction] = [s for s in spans if s["name"] == "dsh.compaction"]
    assert by_id[compaction["parentSpanId"]]["name"] == "invoke_agent dsh"
    [start] = [e for e in events if e["type"] == "compact/start"]
    [end] = [e for e in events if e["type"] == "compact/end"]
    assert int(compaction["startTimeUnixNano"]) == start["time"] * 1_000_000
    assert int(compaction["endTimeUnixNano"]) == end["time"] * 1_000_000
    chats = [s for s in spans if s["name"] == "chat scripted"]
    assert len(chats) == sum(1 for e in events if e["type"] == "step/start")
    assert all(attrs(c)["gen_ai.provider.name"] == "_OTHER" and "dsh.cost.usd" not in attrs(c) for c in chats)
    readings = [e for c in chats for e in c.get("events", []) if e["name"] == "dsh.time_context.reading"]
    assert len(readings) == 5
    assert {attrs(r)["dsh.time.zone"] for r in readings} == {"Asia/Shanghai"}
    tools = [s for s in spans if s["name"].startswith("execute_tool ")]
    assert tools and all(by_id[t["parentSpanId"]]["name"] == "invoke_agent dsh" for t in tools)
    # Contents are off by default.
    assert not any(k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.tool.call.arg")) for s in spans for k in attrs(s))


def test_message_contents_only_on_request(workdir: Path) -> None:
    run_dsh(["sessions", "import", str(FIXTURE)], workdir)
    for how in (["--content"], []):
        env = {} if how else {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
        result = run_dsh(["sessions", "trace", "compaction-replace", "--json", *how], workdir, **env)
        assert result.returncode == 0, result.stderr
        spans = spans_of(result.stdout)
        [first] = [s for s in spans if s["name"] == "invoke_agent dsh" and attrs(s)["dsh.turn"] == "1"]
        [message] = json.loads(attrs(first)["gen_ai.input.messages"])
        assert message["role"] == "user" and message["parts"][0]["content"].startswith("I am migrating the billing")
        assert any("gen_ai.output.messages" in attrs(s) for s in spans)
        assert any("gen_ai.tool.call.arguments" in attrs(s) for s in spans)


@pytest.mark.slow
def test_an_approval_is_a_span_under_its_tool_call(workdir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    args = json.dumps({"file_path": str(outside), "content": "x"})
    with SSEServer() as server:
        server.push(
            Reply.sse([chunk(role="assistant", tool_calls=[{"index": 0, "id": "call_w", "type": "function",
                       "function": {"name": "write", "arguments": args}}]), chunk(finish="tool_calls")]),
            Reply.sse([chunk(content="Refused."), chunk(finish="stop")]),
        )
        result = run_dsh(["run", "write outside", "--model", "m", "--base-url", server.base_url,
                          "--sandbox", "danger-full-access"], workdir,
                         OPENAI_API_KEY="k", **NO_PROXY)
    assert result.returncode == 0, result.stderr
    assert not outside.exists()
    [log] = session_files(workdir)
    traced = run_dsh(["sessions", "trace", log.stem, "--json"], workdir)
    assert traced.returncode == 0, traced.stderr
    spans = spans_of(traced.stdout)
    [tool] = [s for s in spans if s["name"] == "execute_tool write"]
    [approval] = [s for s in spans if s["name"] == "dsh.approval"]
    assert approval["parentSpanId"] == tool["spanId"]
    assert attrs(approval)["dsh.approval.tool"] == "write"
    assert attrs(approval)["dsh.approval.outcome"] == "unavailable"
    assert tool["status"]["code"] == "STATUS_CODE_ERROR" and "error.type" in attrs(tool)


@pytest.mark.slow
def test_a_sqlite_session_replays_like_a_jsonl_one(workdir: Path) -> None:
    for store in (["--store", "sqlite"], []):
        made = run_dsh(["run", "echo hi", "--output-format", "json", *store], workdir)
        assert made.returncode == 0, made.stderr
        session_id = json.loads(made.stdout)["sessionId"]
        traced = run_dsh(["sessions", "trace", session_id, "--json", *store], workdir)
        assert traced.returncode == 0, traced.stderr
        names = sorted(s["name"] for s in spans_of(traced.stdout))
        assert names == ["chat mock-echo", "chat mock-echo", "execute_tool echo", "invoke_agent main"]


@pytest.mark.slow
def test_a_failed_model_call_is_an_error_span(workdir: Path) -> None:
    with SSEServer() as server:
        server.push(*[Reply.error(500, "upstream exploded") for _ in range(3)])
        result = run_dsh(["run", "hi", "--model", "m", "--base-url", server.base_url], workdir,
                         OPENAI_API_KEY="k", **NO_PROXY)
    assert result.returncode == 1
    [log] = session_files(workdir)
    traced = run_dsh(["sessions", "trace", log.stem, "--json"], workdir)
    assert traced.returncode == 0, traced.stderr
    spans = spans_of(traced.stdout)
    [turn] = [s for s in spans if s["name"] == "invoke_agent main"]
    [chat] = [s for s in spans if s["name"] == "chat m"]
    assert turn["status"]["code"] == chat["status"]["code"] == "STATUS_CODE_ERROR"
    assert "upstream exploded" in turn["status"]["message"]
    assert attrs(turn)["dsh.turn.reason"] == "error" and attrs(chat)["error.type"] == attrs(turn)["error.type"]
