"""resume_100k: load a 100,008-event JSONL log into a live session, against a bare decode.

The log (3,704 turns of the shared 27-event workload, ~17 MB) is written by the real
:class:`~dsh.persistence.jsonl.JsonlStore` (``create`` + ``append``). What is timed, with
``time.perf_counter``:

- **resume**: ``store.load(id)`` (read, scan, envelope and surface validation, crash-repair
  check, fold, derived-message cache), taking the live ``Session`` it returns, and
  ``session.derive_messages()``; the writer lock is released after the clock stops.
- **bare decode**: ``[msgspec.json.decode(line) for line in lines]`` over every line of the same
  file, split beforehand, results kept in a list, GC at its default settings (as a naive loader
  would run). The same decode with the GC paused is reported beside it for context.

Runs alternate first resume / resume / decode (5 rounds, 2 with ``quick``) after one warm-up
load; the figures are medians. The warm-up load writes the log's fold snapshot (``<log>.fold``),
so ``seconds`` is a resume as ``dsh chat --continue`` meets it after any earlier load: checked
snapshot, lazy prefix. ``cold_seconds`` is the same load with the snapshot deleted first (every
line checked, the lines the fold reads decoded and folded), the cost of the first resume of a
log; the new snapshot is written on the store's worker thread after the load returns (the
release that follows, untimed, waits for it). ``sqlite_seconds`` is the resume of the same
session from :class:`~dsh.persistence.sqlite.SqliteStore` (same shape: a warm-up load, then the
median of the rounds). ``ratio`` is median resume / median bare decode at default GC settings
(the definition the anchors use: miniharness's 2.58 s at 8.5x implies a ~0.30 s decode, which is
what the default-GC decode costs here). Pausing the GC makes the bare decode ~3x faster, while
the load already pauses it internally, so ``ratio_vs_gc_paused_decode`` is the stricter figure;
``cold_ratio_vs_gc_paused_decode`` is ``cold_seconds`` over that decode.

Peak RSS: a fresh interpreter (``python -m bench.resume --rss <root>``) imports dsh, loads the
session and reports ``ru_maxrss`` raw (bytes), so the figure includes the interpreter and dsh's
imports (also reported, measured before the load); ``rss_added_bytes`` is the difference, what
the load itself added at its peak (``sqlite_rss_added_bytes`` the same for SQLite,
``cold_rss_added_bytes`` the JSONL load with the snapshot deleted first, its writing included).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from bench._util import gc_off, median, scratch_dir
from bench.workload import TURNS_100K, build_session
from dsh.persistence.base import SessionStore
from dsh.persistence.jsonl import JsonlStore
from dsh.persistence.sqlite import SqliteStore

SESSION_ID = "resume-100k"
REPO = Path(__file__).resolve().parent.parent


async def write_log(root: str, turns: int = TURNS_100K) -> tuple[str, int]:
    """Write the workload's log through the store; returns (path, events)."""
    session = build_session(SESSION_ID, turns)
    events = list(session.events)
    store = JsonlStore(root)
    header = dict(session.header, cwd="/bench")
    await store.create(header)
    for start in range(0, len(events), 10_000):
        await store.append(SESSION_ID, events[start : start + 10_000])
    await store.release(SESSION_ID)
    path = store.locate(header)
    assert path is not None
    return path, len(events)


async def write_sqlite(path: str, turns: int = TURNS_100K) -> int:
    """The same session written through the SQLite store; returns the event count."""
    session = build_session(SESSION_ID, turns)
    events = list(session.events)
    store = SqliteStore(path)
    await store.create(dict(session.header, cwd="/bench"))
    for start in range(0, len(events), 10_000):
        await store.append(SESSION_ID, events[start : start + 10_000])
    await store.close()
    return len(events)


async def _resume_once(store: SessionStore, expected_events: int) -> float:
    start = time.perf_counter()
    stored = await store.load(SESSION_ID)
    session = stored.session
    assert session is not None
    messages = session.derive_messages()
    elapsed = time.perf_counter() - start
    assert len(session) == expected_events and stored.repaired == 0
    assert len(messages) == 3 * (expected_events // 27)
    await store.release(SESSION_ID)
    return elapsed


def _bare_once(lines: list[bytes], *, gc_enabled: bool) -> float:
    decode = msgspec.json.decode
    if gc_enabled:
        start = time.perf_counter()
        decoded = [decode(line) for line in lines]
        elapsed = time.perf_counter() - start
    else:
        with gc_off():
            start = time.perf_counter()
            decoded = [decode(line) for line in lines]
            elapsed = time.perf_counter() - start
    assert len(decoded) == len(lines)
    del decoded
    return elapsed


def _peak_rss(root: str, kind: str = "jsonl") -> dict[str, int]:
    # Through ``sh ... & wait``: Linux carries a process's ``ru_maxrss`` across ``exec`` and a
    # child forked from this (large) process would start with our peak; the grandchild is
    # forked from a small shell, so its reading is its own.
    command = (
        f"{shlex.quote(sys.executable)} -m bench.resume --rss {shlex.quote(root)} "
        f"--kind {kind} & wait $!"
    )
    out = subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, int] = json.loads(out)
    return result


async def _measure(root: str, pairs: int) -> dict[str, Any]:
    path, count = await write_log(root)
    raw = Path(path).read_bytes()
    lines = raw.split(b"\n")[:-1]
    store = JsonlStore(root)
    await _resume_once(store, count)  # warm-up: page cache, imports, allocator arenas
    cold_s: list[float] = []
    resume_s: list[float] = []
    bare_s: list[float] = []
    bare_nogc_s: list[float] = []
    for _ in range(pairs):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + ".fold")
        gc.collect()
        cold_s.append(await _resume_once(store, count))  # no snapshot: writes one
        gc.collect()
        resume_s.append(await _resume_once(store, count))
        gc.collect()
        bare_s.append(_bare_once(lines, gc_enabled=True))
        gc.collect()
        bare_nogc_s.append(_bare_once(lines, gc_enabled=False))
    seconds, bare = median(resume_s), median(bare_s)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path + ".fold")
    cold_rss = _peak_rss(root)  # no snapshot: the first resume (writes one)
    rss = _peak_rss(root)
    database = os.path.join(root, "sqlite", "sessions.sqlite")
    await write_sqlite(database)
    sqlite_store = SqliteStore(database)
    await _resume_once(sqlite_store, count)  # warm-up; writes the snapshot
    sqlite_s: list[float] = []
    for _ in range(pairs):
        gc.collect()
        sqlite_s.append(await _resume_once(sqlite_store, count))
    await sqlite_store.close()
    sqlite_rss = _peak_rss(database, "sqlite")
    return {
        "seconds": round(seconds, 4),
        "sqlite_seconds": round(median(sqlite_s), 4),
        "cold_seconds": round(median(cold_s), 4),
        "rss_added_bytes": rss["peak_rss_bytes"] - rss["rss_before_load_bytes"],
        "sqlite_rss_added_bytes": sqlite_rss["peak_rss_bytes"] - sqlite_rss["rss_before_load_bytes"],
        "bare_decode_seconds": round(bare, 4),
        "ratio": round(seconds / bare, 3),
        "file_bytes": len(raw),
        "peak_rss_bytes": rss["peak_rss_bytes"],
        "events": count,
        "bare_decode_gc_paused_seconds": round(median(bare_nogc_s), 4),
        "rss_before_load_bytes": rss["rss_before_load_bytes"],
        "ratio_vs_gc_paused_decode": round(seconds / median(bare_nogc_s), 3),
        "cold_ratio_vs_gc_paused_decode": round(median(cold_s) / median(bare_nogc_s), 3),
        "cold_rss_added_bytes": cold_rss["peak_rss_bytes"] - cold_rss["rss_before_load_bytes"],
    }


def run(quick: bool) -> dict[str, Any]:
    with scratch_dir("resume") as root:
        return asyncio.run(_measure(root, 2 if quick else 5))


def _vm_hwm() -> int:
    """``VmHWM`` of this process (a cross-check of ``ru_maxrss``), in bytes."""
    with open("/proc/self/status") as file:
        for line in file:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _rss_child(root: str, kind: str) -> None:
    """In a fresh interpreter: load the session and print ``ru_maxrss`` in bytes."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    async def load() -> Any:
        store: SessionStore = JsonlStore(root) if kind == "jsonl" else SqliteStore(root)
        stored = await store.load(SESSION_ID)
        assert stored.session is not None
        stored.session.derive_messages()
        await store.close()  # after the snapshot a first load writes in the background
        return store, stored

    live = asyncio.run(load())  # kept alive until after the reading
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps(
            {"peak_rss_bytes": peak, "rss_before_load_bytes": before, "vm_hwm_bytes": _vm_hwm()}
        )
    )
    del live
    os._exit(0)  # the writer lock dies with the process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rss", metavar="ROOT", help=argparse.SUPPRESS)
    parser.add_argument("--kind", default="jsonl", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss:
        _rss_child(args.rss, args.kind)
        return
    print(json.dumps(run(args.quick), indent=2))


if __name__ == "__main__":
    main()
