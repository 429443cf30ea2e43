"""``dsh.Agent(rewind=True)`` snapshots before its tools change files, and ``Agent.rewind``
restores them (live in this process, or from the store in a new one) and forks conversations."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import dsh
from dsh.rewind.ops import Conflict
from dsh.testing import Reply, ScriptedAdapter


@dsh.tool
def save(path: str, text: str) -> str:
    """Write text to a file."""
    Path(path).write_text(text)
    return "saved"


def _agent(tmp_path: Path, model: ScriptedAdapter) -> dsh.Agent:
    return dsh.Agent(model=model, tools=[save], store=tmp_path / "sessions", cwd=str(tmp_path / "ws"), rewind=True)


def test_library_rewind_files_live_and_stored_and_conversation(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("before\n")
    model = ScriptedAdapter([
        Reply(tool_calls=[("c1", "save", {"path": str(ws / "a.txt"), "text": "turn one\n"})]), "one",
        Reply(tool_calls=[("c2", "save", {"path": str(ws / "b.txt"), "text": "turn two\n"})]), "two",
    ])

    async def main() -> None:
        async with _agent(tmp_path, model) as agent:
            await agent.run("first", session_id="s1")
            await agent.run("second", session_id="s1")
            result = await agent.rewind("s1", turn=2)
            assert result.restored == ("b.txt",) and result.session_id == "s1" and not result.forked
            assert not (ws / "b.txt").exists() and (ws / "a.txt").read_text() == "turn one\n"
        (ws / "a.txt").write_text("the user's\n")
        async with _agent(tmp_path, model) as agent:  # a new composition: the store's session
            with pytest.raises(Conflict, match=r"changed after the agent: a\.txt"):
                await agent.rewind("s1", turn=1)
            forced = await agent.rewind("s1", turn=1, force=True, conversation=True)
            assert forced.forked and forced.session_id != "s1" and forced.restored == ("a.txt",)
        assert (ws / "a.txt").read_text() == "before\n"

    asyncio.run(main())
    logs = {p.name: [json.loads(line) for line in p.read_text().splitlines()] for p in (tmp_path / "sessions").rglob("*.jsonl")}
    original = next(v for k, v in logs.items() if k.startswith("s1"))
    assert [e["data"]["toTurn"] for e in original[1:] if e["type"] == "workspace/rewind"] == [2]
    fork = next(v for k, v in logs.items() if not k.startswith("s1"))
    assert fork[0]["parentSession"] == "s1"
    assert [e["type"] for e in fork[1:]][-1] == "workspace/rewind"
    assert [e["type"] for e in fork[1:]] == ["workspace/rewind"]  # before turn 1: no turn kept
