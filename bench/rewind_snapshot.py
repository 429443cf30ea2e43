"""``python -m bench.rewind_snapshot``: workspace snapshots (the ``rewind`` plugin's cost).

A scratch workspace of 10,000 files (200 folders of 50 files, 1-4 KiB of text each) is
snapshotted by :class:`dsh.rewind.store.ShadowStore` exactly as the plugin does before a step:

- ``first``: the first snapshot of the workspace (every file hashed; once per workspace);
- ``unchanged``: a snapshot of the unchanged tree (median of ``--repeat``), the per-step cost;
- ``changed_100``: 100 files rewritten, then a snapshot (median);
- ``turn_end``: the after-turn snapshot plus its change count (snapshot + numstat, median);
- ``restore_100``: restoring 100 changed files with the same code ``dsh sessions rewind`` runs;
- disk: bytes the shadow store grew per ``changed_100`` snapshot, and for the first one.

Prints one JSON object (``--json``) or a short table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench._util import machine, median, scratch_dir
from dsh.rewind.restore import apply_plan, make_plan
from dsh.rewind.store import ShadowStore

FILES, PER_DIR = 10_000, 50


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _make(root: Path, rng: random.Random) -> list[Path]:
    files = []
    for i in range(FILES):
        folder = root / f"pkg{i // PER_DIR:03d}"
        folder.mkdir(exist_ok=True)
        path = folder / f"mod{i % PER_DIR:02d}.py"
        lines = rng.randint(20, 80)
        path.write_text("".join(f"value_{i}_{n} = {rng.random()!r}\n" for n in range(lines)))
        files.append(path)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return files


def _timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return (time.perf_counter() - start) * 1000, out


def run(repeat: int) -> dict[str, Any]:
    rng = random.Random(0)
    with scratch_dir("rewind") as tmp:
        ws, home = Path(tmp) / "ws", Path(tmp) / "home"
        ws.mkdir()
        files = _make(ws, rng)
        store = ShadowStore(ws, home=home)
        first_ms, first = _timed(lambda: store.snapshot("bench"))
        first_bytes = _du(store.dir)
        unchanged = [_timed(lambda: store.snapshot("bench"))[0] for _ in range(repeat)]
        changed, grown, turn_end = [], [], []
        trees = [first.tree]
        for round_ in range(repeat):
            for path in rng.sample(files, 100):
                with path.open("a") as handle:
                    handle.write(f"# edit {round_}\n")
            before = _du(store.dir)
            ms, snap = _timed(lambda: store.snapshot("bench"))
            changed.append(ms)
            grown.append(_du(store.dir) - before)
            trees.append(snap.tree)
            turn_end.append(_timed(lambda since=trees[-2], last=trees[-1]: (
                store.snapshot("bench"), store.numstat(since, last)))[0])
        target, latest = trees[-2], trees[-1]
        touched = store.changed_paths(target, latest)
        with store.locked():
            now = store._write_tree().tree
            want = store.entries(target)
            plan = make_plan(want, store.entries(latest), store.entries(now), touched, force=False)
            restore_ms, _ = _timed(lambda: apply_plan(store, plan, want))
    return {
        "files": FILES,
        "repeat": repeat,
        "first_ms": round(first_ms, 1),
        "first_store_bytes": first_bytes,
        "unchanged_ms_median": round(median(unchanged), 1),
        "changed_100_ms_median": round(median(changed), 1),
        "turn_end_ms_median": round(median(turn_end), 1),
        "restore_100_ms": round(restore_ms, 1),
        "bytes_per_changed_100_snapshot_median": int(median(grown)),
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rewind_snapshot")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.repeat)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:<40} {value}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("LC_ALL", "C")
    sys.exit(main())
