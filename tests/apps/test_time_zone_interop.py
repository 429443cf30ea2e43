"""Prompts that carry zones, in the reference's format: dsh writes the reference's bytes for
them, loads a log the reference wrote with them, and exports it unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apps.conftest import run_dsh, session_files

RPC = "8a2f0c1e-5b7d-4c39-9e61-2d4f8b0a7c53"
REFERENCE_LOG = (
    '{"type":"session","version":0,"id":"main-session-2f1c9b7e-0d4a-4e8b-9c3f-6a5e1d2b7c80",'
    '"createdAt":1796112000000,"cwd":"/work/project"}\n'
    '{"type":"turn/start","seq":0,"time":1796112000001,"data":{"turn":1,"trigger":{"kind":"message",'
    f'"source":{{"kind":"user","rpcId":"{RPC}","clientTimeZone":"Asia/Tokyo"}}}}}}}}\n'
    '{"type":"user/message","seq":1,"time":1796112000002,"data":{"content":[{"type":"text","text":"明日の9時に"}],'
    f'"source":{{"kind":"user","rpcId":"{RPC}","clientTimeZone":"Asia/Tokyo"}}}},"surfaceOp":"append"}}\n'
    '{"type":"context/message","seq":2,"time":1796112000003,"data":{"content":[{"type":"text","text":'
    '"Time sampled while preparing turn 1, step 1: 2026-12-01T17:00:00+09:00[Asia/Tokyo]\\n'
    "Browser time zone for this request: Asia/Tokyo. Interpret otherwise-unqualified dates and times in this zone.\\n"
    'Elapsed since the preceding model-visible message: unavailable."}],"source":{"kind":"plugin","plugin":"time-context"}},'
    '"surfaceOp":"append"}\n'
    '{"type":"turn/end","seq":3,"time":1796112000004,"data":{"turn":1,"reason":{"kind":"completed"}}}\n'
)


@pytest.mark.slow
def test_dsh_writes_a_zoned_prompt_in_the_references_bytes(tmp_path: Path) -> None:
    result = run_dsh(["run", "--time-zone", "Asia/Tokyo", "明日の9時に"], tmp_path, TZ="UTC")
    assert result.returncode == 0, result.stderr
    [log] = session_files(tmp_path)
    line = next(x for x in log.read_text().splitlines() if '"type":"user/message"' in x)
    event = json.loads(line)
    rpc = event["data"]["source"]["rpcId"]
    # The reference's layout, key for key: the envelope, then {content, source{kind, rpcId, clientTimeZone}}.
    assert line == (
        f'{{"type":"user/message","seq":{event["seq"]},"time":{event["time"]},"data":{{"content":'
        f'[{{"type":"text","text":"明日の9時に"}}],"source":{{"kind":"user","rpcId":"{rpc}",'
        f'"clientTimeZone":"Asia/Tokyo"}}}},"surfaceOp":"append"}}'
    )
    start = next(json.loads(x) for x in log.read_text().splitlines() if '"type":"turn/start"' in x)
    assert start["data"]["trigger"]["source"] == event["data"]["source"]


@pytest.mark.slow
def test_a_reference_log_with_zoned_prompts_loads_shows_and_exports_unchanged(tmp_path: Path) -> None:
    source = tmp_path / "reference.jsonl"
    source.write_bytes(REFERENCE_LOG.encode())
    imported = run_dsh(["sessions", "import", str(source)], tmp_path)
    assert imported.returncode == 0, imported.stderr
    sid = "main-session-2f1c9b7e-0d4a-4e8b-9c3f-6a5e1d2b7c80"
    exported = run_dsh(["sessions", "export", sid], tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.encode() == REFERENCE_LOG.encode()
    shown = run_dsh(["sessions", "show", sid], tmp_path, TZ="UTC")
    assert "明日の9時に  · zone Asia/Tokyo" in shown.stdout
    rebuilt = run_dsh(["sessions", "requests", sid], tmp_path)
    assert rebuilt.returncode == 0, rebuilt.stderr
