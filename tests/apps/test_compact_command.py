"""``/compact`` in the stdio app, and checkpoints in ``dsh sessions show``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.apps.conftest import Interactive, run_dsh, session_files

SUMMARIZER = '''
"""A keyless summariser for tests: always the same short summary."""

name = "test-summarizer"
inject = ["llm"]


class Summarizer:
    async def stream(self, request):
        text = "The user said first and second."
        yield {"type": "block-start", "index": 0, "blockType": "text"}
        yield {"type": "text-delta", "index": 0, "text": text}
        yield {"type": "block-end", "index": 0, "block": {"type": "text", "text": text}}
        yield {"type": "finish", "reason": {"kind": "stop"}}


def apply(ctx, config):
    ctx.defer(ctx.llm.register_adapter(["summarizer"], Summarizer()))
'''

CONFIG = """\
- id: echo
  name: echo-llm
  config: {delayMs: 0}
- id: clock
  name: time-context
  config: {timeZone: Asia/Shanghai}
- id: summarizer
  name: ./summarizer.py
- id: compact
  name: compact
  config:
    contextWindow: 100000
    thresholdRatio: 0.9
    retainTokens: 10
    summarizationModel: summarizer
    maxTokens: 512
    compactionRetries: 0
    auto: false
- id: app
  name: stdio-app
  config: {model: mock-echo}
"""


@pytest.mark.slow
def test_compact_command_shadows_history_behind_a_checkpoint(workdir: Path) -> None:
    (workdir / "summarizer.py").write_text(SUMMARIZER)
    (workdir / "dsh.yml").write_text(CONFIG)
    chat = Interactive(["chat", "--config", "dsh.yml"], workdir)
    for n, line in enumerate(["first", "second"], start=2):
        chat.send(line + "\n")
        chat.read_until("\n> ", count=n)
    chat.send("/compact\n")
    chat.read_until("\n> ", count=4)  # the compaction runs in a one-shot turn of its own
    chat.send("third\n")
    rc, _, err = chat.close()
    assert rc == 0, err
    [log] = session_files(workdir)
    events = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    types = [e["type"] for e in events]
    assert types.count("compact/summary") == 1
    start = types.index("compact/start")
    assert types[start : start + 4] == ["compact/start", "compact/summary", "user/message", "compact/end"]
    checkpoint = events[start + 2]
    assert checkpoint["surfaceOp"]["op"] == "replace"
    assert checkpoint["data"]["source"] == {"kind": "plugin", "plugin": "compact"}
    assert "Covers 20" in checkpoint["data"]["content"][0]["text"]
    assert "+08:00" in checkpoint["data"]["content"][0]["text"]
    # Nothing was deleted: every earlier event is still in the raw log.
    assert [e["seq"] for e in events] == list(range(len(events)))

    show = run_dsh(["sessions", "show", log.stem, "--config", "dsh.yml"], workdir)
    assert show.returncode == 0, show.stderr
    assert "▣ checkpoint" in show.stdout
    assert "(shadowed)" in show.stdout
    requests = json.loads(run_dsh(["sessions", "requests", log.stem, "--json"], workdir).stdout)
    last = requests[-1]["messages"]
    assert last[0]["content"][1]["text"] == "The user said first and second."
