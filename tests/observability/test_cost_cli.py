"""Cost in money, from the price table (genai-prices) and the logged usage, wherever usage shows:
``dsh run --output-format json`` (``costUsd``), ``dsh sessions show`` (per turn and in total),
the terminal's per-turn usage line and ``/usage``. An unknown model shows no cost at all."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import genai_prices
import pytest

from dsh.observability.cost import format_usd
from tests.apps.conftest import run_dsh, session_files
from tests.llm.sse_server import Reply, SSEServer, chunk, usage_chunk

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
MODEL = "gpt-4o"
USAGE = {"prompt_tokens": 5000, "completion_tokens": 300, "prompt_tokens_details": {"cached_tokens": 4000}}


def table_price(model: str, fresh: int, cached: int, out: int, at_ms: int) -> Decimal:
    usage = genai_prices.Usage(input_tokens=fresh + cached, cache_read_tokens=cached, output_tokens=out)
    when = dt.datetime.fromtimestamp(at_ms / 1000, dt.UTC)
    return Decimal(genai_prices.calc_price(usage, model, genai_request_timestamp=when).total_price)


def events(workdir: Path) -> list[dict[str, Any]]:
    [log] = session_files(workdir)
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


def priced_reply() -> Reply:
    return Reply.sse([chunk(role="assistant", content="Priced."), chunk(finish="stop"), usage_chunk(USAGE)])


def test_run_json_and_show_give_the_price_tables_cost(workdir: Path) -> None:
    with SSEServer() as server:
        server.push(priced_reply())
        result = run_dsh(["run", "hi", "--model", MODEL, "--base-url", server.base_url, "--output-format", "json"],
                         workdir, OPENAI_API_KEY="k", **NO_PROXY)
    assert result.returncode == 0, result.stderr
    [message] = [e for e in events(workdir) if e["type"] == "assistant/message"]
    assert message["data"]["usage"] == {"inputTokens": 1000, "outputTokens": 300, "cacheReadTokens": 4000}
    expected = table_price(MODEL, 1000, 4000, 300, message["time"])
    assert expected > 0
    assert json.loads(result.stdout)["costUsd"] == pytest.approx(float(expected), rel=1e-12)

    shown = run_dsh(["sessions", "show", json.loads(result.stdout)["sessionId"]], workdir)
    assert shown.returncode == 0, shown.stderr
    [turn_end] = [line for line in shown.stdout.splitlines() if "turn 1 ended" in line]
    assert turn_end.endswith(f"cache hits 4000 (80% of input) · cost {format_usd(expected)}")
    assert shown.stdout.splitlines()[-1] == f"total cost {format_usd(expected)} over 1 model calls (prices: genai-prices)"


def test_an_unknown_model_shows_no_cost(workdir: Path) -> None:
    result = run_dsh(["run", "hi", "--output-format", "json"], workdir)  # mock-echo: no price
    assert result.returncode == 0, result.stderr
    obj = json.loads(result.stdout)
    assert obj["model"] == "mock-echo" and obj["usage"]["inputTokens"] > 0
    assert obj["costUsd"] is None
    shown = run_dsh(["sessions", "show", obj["sessionId"]], workdir)
    assert shown.returncode == 0, shown.stderr
    assert "cost" not in shown.stdout


@pytest.mark.pty
@pytest.mark.slow
def test_the_terminal_usage_line_and_usage_command_show_the_cost(workdir: Path) -> None:
    from tests.apps.pty_screen import Terminal

    with SSEServer() as server:
        server.push(priced_reply())
        term = Terminal(["chat", "--base-url", server.base_url, "--model", MODEL], workdir, OPENAI_API_KEY="k", **NO_PROXY)
        term.expect("Ctrl-D to leave")
        term.type("hi\r")
        screen = term.expect(f"{MODEL} · turn 1 ·")
        [message] = [e for e in events(workdir) if e["type"] == "assistant/message"]
        cost = format_usd(table_price(MODEL, 1000, 4000, 300, message["time"]))
        term.expect(f"{MODEL} · turn 1 · 1000 in · 300 out · 4000 cached (80% of input) · {cost} · ")
        term.type("/usage\r")
        screen = term.expect(cost, count=2)
        term.type("\x04")
        assert term.wait() == 0
    unwrapped = screen.replace("\n", "")
    assert f"1 model calls · {MODEL} · 1 turns · 1000 in · 300 out · 4000 cached (80% of input) · {cost}" in unwrapped
