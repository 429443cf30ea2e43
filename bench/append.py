"""append and derive_incremental: the session's write path and its derived-message cache.

append
    The 100,008 events of the shared workload (3,704 turns of 27) go through
    ``Session.append`` (lossless-JSON snapshot, envelope and surface validation, fold, derived
    messages) on a fresh session with no observer; the arguments are built beforehand. Timed
    with ``time.perf_counter``, GC at its default settings; the figure is the median rate over
    5 sessions (2 with ``quick``). ``events_per_s_store_listening`` is the same with the session
    published on a ``Context`` whose ``jsonl-sessions`` plugin buffers every event (no flush).

flush
    ``flush_ms_per_turn``: a session published on a ``Context`` with the ``jsonl-sessions``
    plugin; each turn's 27 events are appended (not timed), then ``await ctx.sessions.flush``
    is timed: the coordinator's drain, line encoding and checks, ``write`` and ``fsync`` on
    ext4. The first flush (which creates the file: temp file, fsync, link, directory fsync) is
    reported apart; the figure is the median of the other 300 (100 with ``quick``). After each
    flush the same bytes go to a scratch file with a bare ``os.write`` + ``os.fsync``, timed:
    ``raw_write_fsync_ms`` (median) is what the disk alone costs at those moments.

derive_incremental
    ``derive_messages()`` is called after every append of the same 100,008 events, each call
    timed alone with ``time.perf_counter_ns``. ``us_at_1k`` is the median of the calls made at
    1,000..1,999 events, ``us_at_100k`` of the calls at 99,008..100,007 (timer overhead
    included in both); medians over 3 sessions (1 with ``quick``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from bench._util import median, percentile, scratch_dir
from bench.workload import EVENTS_PER_TURN, TURNS_100K, Op, apply_ops, build_ops
from dsh.agent import sessions as sessions_plugin
from dsh.persistence import jsonl
from dsh.runtime import Context
from dsh.session import Session, encode_event


def _append_rate(ops: list[Op]) -> float:
    session = Session("append")
    start = time.perf_counter()
    apply_ops(session, ops)
    elapsed = time.perf_counter() - start
    assert len(session) == len(ops)
    return len(ops) / elapsed


async def _append_rate_listening(ops: list[Op], root: str) -> float:
    ctx = Context()
    await ctx.plugin(sessions_plugin)
    await ctx.plugin(jsonl, {"root": root})
    session = ctx.sessions.create(f"listening-{time.monotonic_ns()}")
    start = time.perf_counter()
    apply_ops(session, ops)
    elapsed = time.perf_counter() - start
    await ctx.sessions.dispose(session)  # drains the buffer to disk, untimed
    await ctx.dispose()
    return len(ops) / elapsed


async def _flush_costs(turns: int, root: str) -> tuple[float, list[float], list[float]]:
    """A session flushed after every 27-event turn: (first flush ms, later flushes ms, raw ms).

    After each flush the same bytes are written to a scratch file with ``os.write`` +
    ``os.fsync`` (timed alone), so the disk's own cost is measured in the same moments.
    """
    ctx = Context()
    await ctx.plugin(sessions_plugin)
    await ctx.plugin(jsonl, {"root": root})
    session = ctx.sessions.create("flush")
    ops = build_ops(turns + 1)
    costs: list[float] = []
    raw: list[float] = []
    perf = time.perf_counter
    fd = os.open(os.path.join(root, "raw.bin"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for turn in range(turns + 1):
            before = len(session)
            apply_ops(session, ops[turn * EVENTS_PER_TURN : (turn + 1) * EVENTS_PER_TURN])
            start = perf()
            await ctx.sessions.flush(session)
            costs.append((perf() - start) * 1000)
            payload = b"".join(encode_event(e) + b"\n" for e in session.events[before:])
            start = perf()
            os.write(fd, payload)
            os.fsync(fd)
            raw.append((perf() - start) * 1000)
    finally:
        os.close(fd)
    await ctx.dispose()
    return costs[0], costs[1:], raw[1:]


def _derive_windows(ops: list[Op]) -> tuple[float, float]:
    """Median ns per ``derive_messages()`` call at 1,000..1,999 and at the last 1,000 events."""
    session = Session("derive")
    append, derive, perf = session.append, session.derive_messages, time.perf_counter_ns
    samples: list[int] = []
    total = 0
    for kind, data, surface_op, seqs in ops:
        append(kind, data, surface_op=surface_op, source_event_seqs=seqs)
        start = perf()
        messages = derive()
        samples.append(perf() - start)
        total += len(messages)
    assert total > 0
    # samples[i] was taken with i + 1 events in the log.
    early = samples[999:1999]
    late = samples[-1000:]
    return median(early), median(late)


def run_append(quick: bool) -> dict[str, Any]:
    ops = build_ops(TURNS_100K)
    rounds = 2 if quick else 5
    rates = [_append_rate(ops) for _ in range(rounds)]
    with scratch_dir("append") as root:
        listening = [asyncio.run(_append_rate_listening(ops, root)) for _ in range(rounds)]
        first, flushes, raw = asyncio.run(_flush_costs(100 if quick else 300, root))
    return {
        "events_per_s": round(median(rates)),
        "flush_ms_per_turn": round(median(flushes), 3),
        "events": len(ops),
        "events_per_s_store_listening": round(median(listening)),
        "first_flush_ms": round(first, 3),
        "flush_p99_ms": round(percentile(flushes, 0.99), 3),
        "raw_write_fsync_ms": round(median(raw), 3),
    }


def run_derive(quick: bool) -> dict[str, Any]:
    ops = build_ops(TURNS_100K)
    windows = [_derive_windows(ops) for _ in range(1 if quick else 3)]
    early = median([w[0] for w in windows]) / 1000
    late = median([w[1] for w in windows]) / 1000
    return {
        "us_at_1k": round(early, 3),
        "us_at_100k": round(late, 3),
        "ratio": round(late / early, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(
        json.dumps(
            {"append": run_append(args.quick), "derive_incremental": run_derive(args.quick)},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
