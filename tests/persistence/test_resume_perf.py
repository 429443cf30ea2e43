"""Resume speed: loading a 100k-event JSONL log (read, scan, validate, fold, derive) must cost at
most 3x a bare ``msgspec.json.decode`` of every line, keeping the decoded values (the benchmark
anchor is 8.5x). Both sides are timed best-of-3 in this process.

The log mirrors the anchor's workload: 27 events a turn (user message, time reading, a streamed
reply of 20 chunks, provenance-carrying assistant message), ~16 MB.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from dsh import _json
from dsh.persistence.jsonl import JsonlStore, header_line

pytestmark = [pytest.mark.slow, pytest.mark.perf]

EVENTS = 100_008


def _turn(turn: int, seq: int, time_ms: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(kind: str, data: Any, **extra: Any) -> None:
        out.append(
            {"type": kind, "seq": seq + len(out), "time": time_ms + len(out), "data": data, **extra}
        )

    user = {"kind": "user"}
    add("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": user}})
    add(
        "user/message",
        {"content": [{"type": "text", "text": f"message {turn} 你好"}], "source": user},
        surfaceOp="append",
    )
    reading = (
        f"Time sampled while preparing turn {turn}, step 1: 2026-07-14T09:00:00+08:00[Asia/Shanghai]\n"
        "Elapsed since the preceding model-visible message: 0s."
    )
    add(
        "context/message",
        {
            "content": [{"type": "text", "text": reading}],
            "source": {"kind": "plugin", "plugin": "time-context"},
        },
        surfaceOp="append",
    )
    add("step/start", {"turn": turn, "step": 1})
    first = seq + len(out)
    chunk = {"turn": turn, "step": 1}
    add(
        "assistant/chunk",
        {**chunk, "chunk": {"type": "block-start", "index": 0, "blockType": "text"}},
    )
    for index in range(16):
        add(
            "assistant/chunk",
            {**chunk, "chunk": {"type": "text-delta", "index": 0, "text": f"word{index} "}},
        )
    reply = [{"type": "text", "text": "reply " * 17}]
    add("assistant/chunk", {**chunk, "chunk": {"type": "block-end", "index": 0, "block": reply[0]}})
    usage = {"inputTokens": 20, "outputTokens": 5}
    add("assistant/chunk", {**chunk, "chunk": {"type": "usage", "usage": usage}})
    add("assistant/chunk", {**chunk, "chunk": {"type": "finish", "reason": {"kind": "stop"}}})
    last = seq + len(out)
    add(
        "assistant/message",
        {"turn": turn, "step": 1, "content": reply, "usage": usage},
        sourceEventSeqs=list(range(first, last)),
        surfaceOp="append",
    )
    add("step/end", {"turn": turn, "step": 1})
    add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return out


def write_big_log(store: JsonlStore, session_id: str) -> Path:
    header = {"version": 0, "id": session_id, "createdAt": 1_783_990_800_000, "cwd": "/bench"}
    lines = [header_line(header)]
    turn = 1
    while len(lines) - 1 < EVENTS:
        lines.extend(
            _json.encode(event) for event in _turn(turn, len(lines) - 1, 1_783_990_800_000)
        )
        turn += 1
    path = Path(store.locate(header) or "")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\n".join(lines[: EVENTS + 1]) + b"\n")
    return path


def best_of(runs: int, action: Any) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def test_resume_100k_is_within_3x_of_a_bare_decode(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    path = write_big_log(store, "bench")
    raw = path.read_bytes()
    lines = raw.split(b"\n")[:-1]
    decode = msgspec.json.decode

    def bare() -> None:
        # Decode every line and keep the values, as any loader must (default GC settings).
        decoded = [decode(line) for line in lines]
        assert len(decoded) == EVENTS + 1

    def resume() -> None:
        async def run() -> None:
            stored = await store.load("bench")
            assert stored.session is not None
            assert len(stored.session.derive_messages()) == 3 * (EVENTS // 27)
            await store.release("bench")

        asyncio.run(run())

    resume()  # warm the page cache and the imports
    bare_s = best_of(3, bare)
    resume_s = best_of(3, resume)
    ratio = resume_s / bare_s
    print(
        f"\nresume_100k: load {resume_s * 1000:.0f} ms, bare decode {bare_s * 1000:.0f} ms, {ratio:.2f}x"
    )
    assert ratio <= 3.0
