"""``dsh.Agent.run(..., time_zone=...)``: each prompt's own zone, through a scripted model.

The model is a loopback chat-completions server (``tests/llm/sse_server.py``); what it received
is what the model read.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

import dsh
from tests.llm.sse_server import Reply, SSEServer, chunk

STAMP = re.compile(r"step 1: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d([+-]\d\d:\d\d)\[([^\]]+)\]")


def _reply(text: str) -> Reply:
    return Reply.sse([chunk(role="assistant", content=text), chunk(finish="stop")], first_delay=0.2)


def _readings(request: dict[str, Any]) -> list[str]:
    texts = []
    for message in request["messages"]:
        content = message.get("content")
        if isinstance(content, str) and "Time sampled while preparing" in content:
            texts.append(content)
    return texts


@pytest.fixture
def server() -> Any:
    with SSEServer() as s:
        yield s


@pytest.mark.parametrize("zone_line", [False, True])
async def test_two_concurrent_runs_read_their_own_zones(
    server: SSEServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zone_line: bool
) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "test-key")
    monkeypatch.setenv("TZ", "UTC")
    server.push(_reply("one"))
    server.push(_reply("two"))
    options: dict[str, object] = {"zoneLine": True} if zone_line else {}
    async with dsh.Agent(
        model="test-model", base_url=server.base_url, store=tmp_path / "s", time_context=options or True
    ) as agent:
        tokyo, new_york = await asyncio.gather(
            agent.run("in Tokyo", session_id="tokyo", time_zone="Asia/Tokyo"),
            agent.run("in New York", session_id="ny", time_zone="America/New_York"),
        )
    assert tokyo.reason == new_york.reason == {"kind": "completed"}
    seen: dict[str, str] = {}
    for recorded in server.requests:
        body = recorded.json
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        [reading] = _readings(body)
        seen[prompt] = reading
    tokyo_reading, ny_reading = seen["in Tokyo"], seen["in New York"]
    match = STAMP.search(tokyo_reading)
    assert match is not None and match.groups() == ("+09:00", "Asia/Tokyo"), tokyo_reading
    match = STAMP.search(ny_reading)
    assert match is not None and match.group(2) == "America/New_York", ny_reading
    assert match.group(1) in ("-05:00", "-04:00")
    line = "Browser time zone for this request: {}. Interpret otherwise-unqualified dates and times in this zone."
    if zone_line:
        assert tokyo_reading.split("\n")[1] == line.format("Asia/Tokyo")
        assert ny_reading.split("\n")[1] == line.format("America/New_York")
    else:  # the seed's two lines: the zone changes only the clock
        assert "Browser time zone" not in tokyo_reading + ny_reading
        assert len(tokyo_reading.split("\n")) == 2
    # The zone is durable in the prompt's own source, in the reference's user-rpc form.
    [log] = (tmp_path / "s").glob("cwd-*/tokyo.jsonl")
    [prompt] = [json.loads(x) for x in log.read_text().splitlines()[1:] if '"user/message"' in x]
    source = prompt["data"]["source"]
    assert list(source) == ["kind", "rpcId", "clientTimeZone"]
    assert source["kind"] == "user" and source["clientTimeZone"] == "Asia/Tokyo"
    assert re.fullmatch(r"[0-9a-f-]{36}", source["rpcId"])


@pytest.mark.parametrize("bad", ["", " UTC", "CST", "+09:00", "Not/A_Real_Zone", "utc"])
async def test_an_invalid_zone_raises_before_anything_is_appended(tmp_path: Path, bad: str) -> None:
    async with dsh.Agent(store=tmp_path / "s") as agent:
        with pytest.raises(ValueError, match=r"^time_zone must be UTC or a valid IANA Area/Location name, got "):
            await agent.run("hi", session_id="s1", time_zone=bad)
        with pytest.raises(ValueError, match="time_zone must be UTC"):
            async for _ in agent.run_stream("hi", session_id="s1", time_zone=bad):
                pass
    assert not list((tmp_path / "s").glob("**/*.jsonl"))


def test_run_sync_refuses_an_invalid_zone_first(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match='time_zone must be UTC or a valid IANA Area/Location name, got "CST"'):
        dsh.Agent(store=tmp_path / "s").run_sync("hi", time_zone="CST")
    assert not list((tmp_path / "s").glob("**/*.jsonl"))


def test_run_sync_canonicalises_the_spelling(tmp_path: Path) -> None:
    result = dsh.Agent(store=tmp_path / "s").run_sync("hi", time_zone="asia/TOKYO")
    [prompt] = [e for e in result.events if e.type == "user/message"]
    assert prompt.data["source"]["clientTimeZone"] == "Asia/Tokyo"
    [reading] = [e for e in result.events if e.type == "context/message"]
    assert "+09:00[Asia/Tokyo]" in reading.data["content"][0]["text"]
