"""A large, valid JSONL v0 session written directly (for memory tests of the read commands)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.apps.conftest import bucket

HEADER = {"config": {"model": "mock-echo"}, "system": "Be brief.", "tools": []}


def write_big_session(root: Path, cwd: Path, session_id: str, *, turns: int, chunks: int) -> Path:
    """``turns`` turns of ``chunks`` text chunks each: ``turns * (chunks + 8)`` events."""
    path = bucket(root, cwd) / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = 1_790_000_000_000
    seq = 0
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    with path.open("w") as out:
        out.write(dumps({"type": "session", "version": 0, "id": session_id, "createdAt": t0, "cwd": str(cwd)}) + "\n")

        def emit(kind: str, data: dict, **extra: object) -> int:
            nonlocal seq
            line = {"type": kind, "seq": seq, "time": t0 + seq, "data": data, **extra}
            out.write(dumps(line) + "\n")
            seq += 1
            return seq - 1

        for turn in range(1, turns + 1):
            emit("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": {"kind": "user"}}})
            emit("user/message", {"content": [{"type": "text", "text": f"question {turn}"}], "source": {"kind": "user"}},
                 surfaceOp="append")
            emit("step/start", {"turn": turn, "step": 1})
            if turn == 1:
                emit("request/header", {"header": HEADER, "reason": "initial"})
            first = emit("assistant/chunk", {"turn": turn, "step": 1, "chunk": {"type": "block-start", "index": 0, "blockType": "text"}})
            for _ in range(chunks):
                emit("assistant/chunk", {"turn": turn, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x"}})
            emit("assistant/message", {"turn": turn, "step": 1, "content": [{"type": "text", "text": "x" * chunks}],
                                       "usage": {"inputTokens": 10, "outputTokens": chunks}},
                 sourceEventSeqs=list(range(first, seq)), surfaceOp="append")
            emit("step/end", {"turn": turn, "step": 1})
            emit("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return path
