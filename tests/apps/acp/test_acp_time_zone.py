"""``dsh acp``: a prompt's zone from ``session/prompt``'s ``_meta.clientTimeZone``, the process
zone when it names none, and the reference host's refusal of a bad one (nothing appended)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from acp.exceptions import RequestError

from tests.apps.acp.acp_support import dsh_acp, initialize, stderr_of, text
from tests.apps.conftest import session_files

pytestmark = pytest.mark.slow

LINE = "Browser time zone for this request: {}. Interpret otherwise-unqualified dates and times in this zone."


def _log(ws: Path) -> list[dict[str, object]]:
    [log] = session_files(ws)
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


def _readings(events: list[dict[str, object]]) -> list[str]:
    return [
        e["data"]["content"][0]["text"]  # type: ignore[index]
        for e in events
        if e["type"] == "context/message" and e["data"]["source"] == {"kind": "plugin", "plugin": "time-context"}  # type: ignore[index]
    ]


async def test_meta_zone_then_the_process_zone_and_a_bad_zone_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    async with dsh_acp(tmp_path, TZ="Asia/Shanghai") as (conn, _proc, _rec, log):
        await initialize(conn)
        sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
        first = await asyncio.wait_for(
            conn.prompt(session_id=sid, prompt=[text("from tokyo")], clientTimeZone="Asia/Tokyo"), 60
        )
        assert first.stop_reason == "end_turn", stderr_of(log)
        second = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text("no zone sent")]), 60)
        assert second.stop_reason == "end_turn", stderr_of(log)
        with pytest.raises(RequestError) as bad:
            await conn.prompt(session_id=sid, prompt=[text("bad")], clientTimeZone="CST")
        assert bad.value.code == -32602
        assert str(bad.value) == "clientTimeZone must be UTC or a valid IANA Area/Location name"
        assert bad.value.data == {"value": "CST"}
        await conn.close_session(session_id=sid)
    events = _log(ws)
    prompts = [e["data"] for e in events if e["type"] == "user/message"]
    assert [p["content"][0]["text"] for p in prompts] == ["from tokyo", "no zone sent"]  # type: ignore[index]
    assert [p["source"]["clientTimeZone"] for p in prompts] == ["Asia/Tokyo", "Asia/Shanghai"]  # type: ignore[index]
    tokyo, shanghai = _readings(events)
    assert "+09:00[Asia/Tokyo]" in tokyo.split("\n")[0]
    assert tokyo.split("\n")[1] == LINE.format("Asia/Tokyo")
    assert tokyo.endswith("Elapsed since the preceding model-visible message: unavailable.")
    assert "+08:00[Asia/Shanghai]" in shanghai.split("\n")[0]
    assert shanghai.split("\n")[1] == LINE.format("Asia/Shanghai")
