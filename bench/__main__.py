"""``python -m bench``: dsh's benchmark suite, as a table or one JSON object.

Usage::

    uv run python -m bench            # every workload, full repetitions, a table
    uv run python -m bench --quick    # every size, fewer repetitions (well under two minutes)
    uv run python -m bench --json     # one JSON object on stdout (progress goes to stderr)
    uv run python -m bench --only loop,append
    uv run python -m bench --soak     # the reliability soak (bench.soak.main), nothing else

Workloads (each module's docstring says exactly what is timed): ``resume_100k``
(:mod:`bench.resume`), ``append`` and ``derive_incremental`` (:mod:`bench.append`), ``loop``
(:mod:`bench.agent_loop`), ``loop_telemetry`` (:mod:`bench.telemetry`), ``prestep_depth`` (:mod:`bench.prestep_depth`), ``pg_append``
(:mod:`bench.pg_append`), ``startup`` (:mod:`bench.startup`), ``store_loop_lag``
(:mod:`bench.store_lag`). The fleet run is separate: ``python -m bench.fleet_pg``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import (
    agent_loop,
    append,
    pg_append,
    prestep_depth,
    resume,
    startup,
    store_lag,
    telemetry,
)
from bench._util import machine

Runner = Callable[[bool], dict[str, Any]]

WORKLOADS: dict[str, Runner] = {
    "resume_100k": resume.run,
    "append": append.run_append,
    "derive_incremental": append.run_derive,
    "loop": agent_loop.run,
    "loop_telemetry": telemetry.run,
    "prestep_depth": prestep_depth.run,
    "pg_append": pg_append.run,
    "startup": startup.run,
    "store_loop_lag": store_lag.run,
}


class Row:
    """One line of the table: a figure, its target, and the anchors it is compared with.

    ``better`` is ``"lower"`` or ``"higher"``; ``vs`` columns show how many times better dsh is
    than the anchor (above 1: dsh is better).
    """

    def __init__(
        self,
        label: str,
        value: float | None,
        unit: str,
        better: str,
        target: float | None = None,
        dsh_ts: float | None = None,
        mini: float | None = None,
    ) -> None:
        self.label, self.value, self.unit, self.better = label, value, unit, better
        self.target, self.dsh_ts, self.mini = target, dsh_ts, mini

    def met(self) -> str:
        if self.target is None or self.value is None:
            return ""
        ok = self.value <= self.target if self.better == "lower" else self.value >= self.target
        return "yes" if ok else "NO"

    def times_better(self, anchor: float | None) -> str:
        if anchor is None or self.value is None or self.value == 0:
            return ""
        factor = anchor / self.value if self.better == "lower" else self.value / anchor
        return f"{factor:.2f}x"


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def rows(results: dict[str, Any]) -> list[Row]:
    """The table rows for whatever workloads ran, with the reference anchors (see BENCHMARKS.md)."""
    out: list[Row] = []
    r = results.get("resume_100k")
    if r:
        out += [
            Row("resume_100k: load+fold+derive (s)", r["seconds"], "s", "lower", 0.06, 0.866, 2.58),
            Row("resume_100k: from SQLite (s)", r.get("sqlite_seconds"), "s", "lower", 0.08),
            Row("resume_100k: no snapshot yet (s)", r.get("cold_seconds"), "s", "lower"),
            Row(
                "resume_100k: RSS added by the load (MB)",
                r["rss_added_bytes"] / 1e6 if "rss_added_bytes" in r else None,
                "MB",
                "lower",
                40,
            ),
            Row("resume_100k: / bare decode (x)", r["ratio"], "x", "lower", 3, 6.6, 8.5),
            Row(
                "resume_100k: / GC-paused decode (x)", r["ratio_vs_gc_paused_decode"], "x", "lower"
            ),
            Row(
                "resume_100k: no snapshot yet / GC-paused decode (x)",
                r.get("cold_ratio_vs_gc_paused_decode"),
                "x",
                "lower",
                1.5,
            ),
            Row(
                "resume_100k: no snapshot yet, RSS added (MB)",
                r["cold_rss_added_bytes"] / 1e6 if "cold_rss_added_bytes" in r else None,
                "MB",
                "lower",
            ),
            Row("resume_100k: peak RSS (MB)", r["peak_rss_bytes"] / 1e6, "MB", "lower"),
            Row("resume_100k: file (MB)", r["file_bytes"] / 1e6, "MB", "lower"),
        ]
    r = results.get("append")
    if r:
        out += [
            Row(
                "append: in memory (events/s)",
                r["events_per_s"],
                "/s",
                "higher",
                100_000,
                255_000,
                93_600,
            ),
            Row(
                "append: JSONL listening (events/s)",
                r["events_per_s_store_listening"],
                "/s",
                "higher",
                None,
                86_500,
            ),
            Row(
                "append: flush 27-event turn (ms)",
                r["flush_ms_per_turn"],
                "ms",
                "lower",
                None,
                0.66,
                0.49,
            ),
            Row("append: bare write+fsync (ms)", r["raw_write_fsync_ms"], "ms", "lower"),
        ]
    r = results.get("derive_incremental")
    if r:
        out += [
            Row("derive: per call at 1k (us)", r["us_at_1k"], "us", "lower", None, 0.45, 62),
            Row("derive: per call at 100k (us)", r["us_at_100k"], "us", "lower", None, 5.6, 20_000),
            Row("derive: 100k / 1k (x)", r["ratio"], "x", "lower", 2, 13.8, 323),
        ]
    r = results.get("loop")
    if r:
        out += [
            Row("loop: harness time per step (ms)", r["ms_per_step"], "ms", "lower", 1, 4.17, 4.49),
            Row(
                "loop: last 100 / first 100 turns (x)",
                r["late_early_ratio"],
                "x",
                "lower",
                1.5,
                6.4,
                15.3,
            ),
            Row(
                "loop: per step net of flush (ms)", r["ms_per_step_excluding_flush"], "ms", "lower"
            ),
            Row(
                "loop: last/first net of flush (x)",
                r["late_early_ratio_excluding_flush"],
                "x",
                "lower",
            ),
            Row(
                "loop: last/first, medians (x)",
                r["late_early_ratio_of_medians"],
                "x",
                "lower",
            ),
        ]
    r = results.get("loop_telemetry")
    if r and "skipped" not in r:
        out += [
            Row("loop, tracing off: per step net of flush (ms)", r["net_ms_per_step_off"], "ms", "lower"),
            Row("loop, tracing on: per step net of flush (ms)", r["net_ms_per_step_on"], "ms", "lower"),
            Row("loop: tracing overhead per step (ms)", r["net_overhead_ms_per_step"], "ms", "lower"),
            Row("loop: tracing CPU on the loop per step (ms)", r["loop_thread_cpu_ms_per_step"], "ms", "lower"),
        ]
    r = results.get("prestep_depth")
    if r:
        anchors = {
            "1000": (280, 50),
            "10000": (360, 600),
            "100000": (2_500, 21_000),
            "1000000": (35_000, 199_000),
        }
        for size, (ts, mini) in anchors.items():
            target = 50 if size == "1000000" else None
            out.append(
                Row(
                    f"prestep: firing at {int(size):,} (us)",
                    r[size],
                    "us",
                    "lower",
                    target,
                    ts,
                    mini,
                )
            )
        out.append(Row("prestep: 10^6 / 10^3 (x)", r["ratio"], "x", "lower", 2, 125, 3_980))
    r = results.get("startup")
    if r:
        out += [
            Row("startup: process start to ready. (s)", r["ready_seconds"], "s", "lower", 0.25),
            Row("startup: / bare python -c pass (x)", r["ratio_vs_bare_python"], "x", "lower"),
        ]
    r = results.get("store_loop_lag")
    if r:
        out += [
            Row("store: longest loop stall during flushes (ms)", r["max_stall_ms"], "ms", "lower"),
            Row("store: one write+fsync, median (ms)", r["fsync_ms"], "ms", "lower"),
            Row("store: longest stall / one fsync (x)", r["stall_vs_fsync"], "x", "lower", 1),
        ]
    r = results.get("pg_append")
    if r:
        for kind in ("postgres", "sqlite", "jsonl"):
            figures = r.get(kind, {})
            if "events_per_s" in figures:
                out.append(
                    Row(
                        f"pg_append: {kind}, 8 sessions (events/s)",
                        figures["events_per_s"],
                        "/s",
                        "higher",
                    )
                )
                out.append(
                    Row(f"pg_append: {kind} flush p50 (ms)", figures["flush_p50_ms"], "ms", "lower")
                )
                out.append(
                    Row(f"pg_append: {kind} flush p99 (ms)", figures["flush_p99_ms"], "ms", "lower")
                )
            elif "skipped" in figures:
                out.append(Row(f"pg_append: {kind} skipped (see below)", None, "", "higher"))
    return out


def table(results: dict[str, Any]) -> str:
    header = ("workload", "dsh", "target", "met", "DSH (TS)", "vs DSH", "miniharness", "vs mini")
    body = [
        (
            row.label,
            _num(row.value),
            ""
            if row.target is None
            else ("<= " if row.better == "lower" else ">= ") + _num(row.target),
            row.met(),
            _num(row.dsh_ts) if row.dsh_ts is not None else "",
            row.times_better(row.dsh_ts),
            _num(row.mini) if row.mini is not None else "",
            row.times_better(row.mini),
        )
        for row in rows(results)
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        )
        for line in [header, *body]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    for kind, figures in results.get("pg_append", {}).items():
        if isinstance(figures, dict) and "skipped" in figures:
            lines.append(f"pg_append: {kind} skipped: {figures['skipped']}")
    return "\n".join(lines)


def _soak(extra: list[str]) -> int:
    try:
        soak = importlib.import_module("bench.soak")
    except ModuleNotFoundError as exc:
        if exc.name != "bench.soak":
            raise
        print("bench.soak is not available (bench/soak.py is missing)", file=sys.stderr)
        return 2
    soak_main = getattr(soak, "main", None)
    if soak_main is None:
        print("bench.soak has no main()", file=sys.stderr)
        return 2
    sys.argv = [f"{sys.argv[0]} --soak", *extra]
    outcome = soak_main()
    return outcome if isinstance(outcome, int) else 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (every size kept)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--only", help="comma-separated workloads: " + ", ".join(WORKLOADS))
    parser.add_argument("--soak", action="store_true", help="run bench.soak.main() instead")
    args, extra = parser.parse_known_args()
    if args.soak:
        return _soak(extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    names = list(WORKLOADS)
    if args.only:
        names = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = [name for name in names if name not in WORKLOADS]
        if unknown:
            parser.error(f"unknown workload(s): {', '.join(unknown)}")
    results: dict[str, Any] = {}
    started = time.perf_counter()
    for name in names:
        began = time.perf_counter()
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        results[name] = WORKLOADS[name](args.quick)
        print(f"[bench] {name}: {time.perf_counter() - began:.1f} s", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(results))
        return 0
    mode = "quick" if args.quick else "full"
    print(f"dsh benchmarks ({mode}, {time.perf_counter() - started:.0f} s) on {machine()}")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
