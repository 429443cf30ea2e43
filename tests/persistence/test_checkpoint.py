"""Checkpoints are written without fsync; flushes are synced and cover the checkpoint's bytes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.support.rig import Rigs


async def test_checkpoint_writes_without_fsync_and_flush_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rigs: Rigs
) -> None:
    ctx = (await rigs.make(models=(), store=str(tmp_path))).ctx
    session = ctx.sessions.create("s", cwd="/x")
    message = {"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}
    session.append("turn/start", {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}})
    session.append("user/message", message, surface_op="append")
    await ctx.sessions.flush(session)  # materialises the file (synced)
    path = Path(ctx.session_store.locate(session.header))

    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    session.append("step/start", {"turn": 1, "step": 1})
    await ctx.sessions.checkpoint(session)
    assert synced == []
    assert path.read_text().splitlines()[-1].startswith('{"type":"step/start"')

    session.append("step/end", {"turn": 1, "step": 1})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    await ctx.sessions.flush(session)
    assert len(synced) == 1
    assert len(path.read_text().splitlines()) == 1 + len(session.events)
