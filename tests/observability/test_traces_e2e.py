"""Live and replayed OpenTelemetry traces of a real ``dsh run``, received by a real OTLP/HTTP
receiver on loopback (:mod:`otlp_receiver`), with a scripted model on loopback that makes two
tool calls in one step."""

from __future__ import annotations

import json
import socket
from decimal import Decimal
from pathlib import Path
from typing import Any

import genai_prices
import pytest

from tests.apps.conftest import run_dsh, session_files
from tests.llm.sse_server import Reply, SSEServer, chunk, usage_chunk
from tests.observability.otlp_receiver import OtlpReceiver, Span

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
MODEL = "deepseek-v4-flash"
USAGE_1 = {"prompt_tokens": 1200, "completion_tokens": 50, "prompt_tokens_details": {"cached_tokens": 1000}}
USAGE_2 = {"prompt_tokens": 1300, "completion_tokens": 5}


def two_tool_calls(server: SSEServer) -> None:
    call = {"type": "function"}
    server.push(
        Reply.sse([
            chunk(role="assistant", content="Two echoes."),
            chunk(tool_calls=[{"index": 0, "id": "call_a", **call, "function": {"name": "echo", "arguments": '{"text":"one"}'}}]),
            chunk(tool_calls=[{"index": 1, "id": "call_b", **call, "function": {"name": "echo", "arguments": '{"text":"two"}'}}]),
            chunk(finish="tool_calls"),
            usage_chunk(USAGE_1),
        ]),
        Reply.sse([chunk(content="Done."), chunk(finish="stop"), usage_chunk(USAGE_2)]),
    )


def price(fresh: int, cached: int, out: int, at_ms: int) -> Decimal:
    import datetime as dt

    usage = genai_prices.Usage(input_tokens=fresh + cached, cache_read_tokens=cached, output_tokens=out)
    when = dt.datetime.fromtimestamp(at_ms / 1000, dt.UTC)
    return Decimal(genai_prices.calc_price(usage, MODEL, genai_request_timestamp=when).total_price)


def tree(spans: list[Span]) -> list[tuple[Any, ...]]:
    """The span tree without ids: each span with its parent's name, times, attributes, events."""
    by_id = {s.span_id: s for s in spans}
    rows = []
    for s in spans:
        parent = by_id[s.parent_id].name if s.parent_id else None
        rows.append((s.name, parent, s.start_ns, s.end_ns, s.kind, s.status,
                     json.dumps(s.attributes, sort_keys=True), json.dumps(s.events, sort_keys=True)))
    return sorted(rows)


def events_of(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


@pytest.mark.slow
def test_live_trace_and_its_replay_match_span_for_span(workdir: Path) -> None:
    with SSEServer() as server, OtlpReceiver() as receiver:
        two_tool_calls(server)
        result = run_dsh(
            ["run", "echo twice", "--model", MODEL, "--base-url", server.base_url, "--output-format", "json"],
            workdir, DEEPSEEK_API_KEY="sk-test", OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, **NO_PROXY,
        )
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        live = receiver.wait_for(5)
        [log] = session_files(workdir)
        events = events_of(log)
        session_id = log.stem

        # The shape: one turn, two model calls, two tool calls under the turn, one trace.
        names = sorted(s.name for s in live)
        assert names == sorted(["invoke_agent main", f"chat {MODEL}", f"chat {MODEL}", "execute_tool echo", "execute_tool echo"])
        [turn] = [s for s in live if s.name.startswith("invoke_agent")]
        chats = sorted((s for s in live if s.name.startswith("chat")), key=lambda s: s.start_ns)
        tools = [s for s in live if s.name.startswith("execute_tool")]
        assert {s.trace_id for s in live} == {turn.trace_id} and turn.parent_id == ""
        assert all(s.parent_id == turn.span_id for s in [*chats, *tools])
        assert turn.resource["service.name"] == "dsh"
        assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert turn.attributes["gen_ai.conversation.id"] == session_id
        assert not any("dsh.incomplete" in s.attributes for s in live)

        # Model calls: the GenAI attributes, usage with cached tokens, cost from the price table.
        first, second = chats
        assert first.attributes["gen_ai.operation.name"] == "chat"
        assert first.attributes["gen_ai.provider.name"] == "deepseek"
        assert first.attributes["gen_ai.request.model"] == MODEL == first.attributes["gen_ai.response.model"]
        assert first.attributes["gen_ai.usage.input_tokens"] == 1200
        assert first.attributes["gen_ai.usage.cache_read.input_tokens"] == 1000
        assert first.attributes["gen_ai.usage.output_tokens"] == 50
        assert first.attributes["gen_ai.response.finish_reasons"] == ["tool-calls"]
        assert second.attributes["gen_ai.usage.input_tokens"] == 1300
        messages = [e for e in events if e["type"] == "assistant/message"]
        cost_1 = price(200, 1000, 50, messages[0]["time"])
        cost_2 = price(1300, 0, 5, messages[1]["time"])
        assert first.attributes["dsh.cost.usd"] == pytest.approx(float(cost_1), rel=1e-12)
        assert turn.attributes["dsh.cost.usd"] == pytest.approx(float(cost_1 + cost_2), rel=1e-9)
        assert json.loads(result.stdout)["costUsd"] == pytest.approx(float(cost_1 + cost_2), rel=1e-9)
        # No message contents by default.
        assert not any(k.startswith(("gen_ai.input", "gen_ai.output")) for s in live for k in s.attributes)

        # Tool calls: name, call id, no error.
        assert sorted(s.attributes["gen_ai.tool.call.id"] for s in tools) == ["call_a", "call_b"]
        assert all(s.attributes["gen_ai.tool.name"] == "echo" and s.status != 2 for s in tools)

        # Each time reading is an event on its step, with the zone and the elapsed time.
        for chat in chats:
            [reading] = [e for e in chat.events if e[0] == "dsh.time_context.reading"]
            assert reading[2]["dsh.time.zone"] == "Asia/Shanghai"
            assert reading[2]["dsh.time.request_zone"] == "Asia/Shanghai"  # the zone line is on
        # Step 1 of a session's first turn has no earlier exchange (stepOneBaseline:
        # previousExchange in the default composition); step 2 measures from step 1's reading.
        elapsed = [next(e for e in c.events if e[0] == "dsh.time_context.reading")[2]["dsh.time.elapsed"] for c in chats]
        assert elapsed[0] == "unavailable" and all(e.endswith("s") for e in elapsed[1:])

        # The log's timestamps, not the exporter's clock.
        [start] = [e for e in events if e["type"] == "turn/start"]
        [end] = [e for e in events if e["type"] == "turn/end"]
        assert turn.start_ns == start["time"] * 1_000_000 and turn.end_ns == end["time"] * 1_000_000

        # Metrics, under the GenAI names.
        assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration", "dsh.gen_ai.client.cost"} <= set(receiver.metrics)

        # Replay from the store: the same span tree, the same timestamps.
        receiver.reset()
        replayed = run_dsh(["sessions", "trace", session_id[:20], "--otlp", receiver.url], workdir, **NO_PROXY)
        assert replayed.returncode == 0, replayed.stderr
        again = receiver.wait_for(5)
        assert len(again) == 5
        assert tree(again) == tree(live)
        assert {s.span_id for s in again}.isdisjoint({s.span_id for s in live})

        # --json: OTLP JSON of the same spans, ids in hex.
        printed = run_dsh(["sessions", "trace", session_id, "--json"], workdir)
        assert printed.returncode == 0, printed.stderr
        body = json.loads(printed.stdout)
        spans = [s for rs in body["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
        assert sorted(s["name"] for s in spans) == names
        assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in spans)
        assert {int(s["startTimeUnixNano"]) for s in spans} == {s.start_ns for s in live}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_collector_down_the_run_succeeds_with_one_warning(workdir: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    result = run_dsh(["run", "echo hi"], workdir, OTEL_EXPORTER_OTLP_ENDPOINT=url, **NO_PROXY)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "The echo tool has spoken.\n"
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"dsh: telemetry: cannot export to {url}/v1/"), lines


@pytest.mark.slow
def test_trace_replay_to_a_collector_that_is_down_fails_in_one_line(workdir: Path) -> None:
    made = run_dsh(["run", "hi"], workdir)
    assert made.returncode == 0, made.stderr
    [log] = session_files(workdir)
    url = f"http://127.0.0.1:{closed_port()}"
    result = run_dsh(["sessions", "trace", log.stem, "--otlp", url], workdir, **NO_PROXY)
    assert result.returncode == 1
    assert result.stderr == f"dsh: could not send the trace to {url}/v1/traces\n"


@pytest.mark.slow
def test_trace_needs_a_destination(workdir: Path) -> None:
    made = run_dsh(["run", "hi"], workdir)
    [log] = session_files(workdir)
    result = run_dsh(["sessions", "trace", log.stem], workdir)
    assert made.returncode == 0 and result.returncode == 2
    assert result.stderr.startswith("dsh: dsh sessions trace: give --otlp URL")


@pytest.mark.perf
def test_a_collector_that_never_answers_delays_the_exit_by_the_shutdown_bound_only(workdir: Path) -> None:
    import threading
    import time

    held: list[socket.socket] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]

        def accept() -> None:  # accept every connection, read nothing, answer nothing
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                held.append(conn)

        threading.Thread(target=accept, daemon=True).start()
        url = f"http://127.0.0.1:{port}"
        baseline = time.monotonic()
        plain = run_dsh(["run", "echo hi"], workdir)
        untraced = time.monotonic() - baseline
        started = time.monotonic()
        # The exporter would wait 60 s for an answer; dsh must not.
        result = run_dsh(["run", "echo hi"], workdir, OTEL_EXPORTER_OTLP_ENDPOINT=url, OTEL_EXPORTER_OTLP_TIMEOUT="60", **NO_PROXY)
        traced = time.monotonic() - started
    for conn in held:
        conn.close()
    assert plain.returncode == 0 and result.returncode == 0, result.stderr
    assert result.stdout == "The echo tool has spoken.\n"
    assert result.stderr.splitlines() == [
        f"dsh: telemetry: cannot export to {url}/v1/traces (no answer within 2000 ms); traces and metrics are dropped"
    ]
    assert held, "the exporter never connected: the test would prove nothing"
    # dsh waits 2 s (shutdownTimeoutMs) and half a second more; loading the SDK costs a little
    # too. Without the bound the exit would wait for the exporter's 60 s.
    assert traced - untraced < 20, (traced, untraced)
