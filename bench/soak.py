"""Soak mode of the reliability suite (``tests/reliability``): the same faults, many more times.

Run it as ``uv run python -m bench --soak`` or ``uv run python -m bench.soak``. By default:

- **crash trials**: 100 per store (JSONL and SQLite). ``dsh chat`` on a slow, tool-calling
  scripted model is SIGKILLed at a seeded random moment, then resumed (``dsh chat --resume``
  for one seed in four, the store API otherwise); the committed prefix must survive byte for
  byte, the interrupted turn must be closed with the reference's crash closers, and seqs must
  continue contiguously (``tests.reliability.support.crash_trial``);
- **truncation sweep**: every byte offset of a three-turn log with four tool calls and an open
  turn, loaded through the JSONL store;
- **corruptions**: 3000 seeded compound corruptions of real logs (flipped bits, duplicated,
  missing or swapped lines, wrong headers, invalid UTF-8, split lines, multi-megabyte lines);
- **lock races**: 20 rounds per store of two ``dsh chat --resume`` started at once;
- **slow-tool kills**: 5 per store. A loopback OpenAI-compatible model calls a tool that
  sleeps; ``dsh chat`` is SIGKILLed while it runs, then ``--continue``d; the assistant message
  and the ``tool/call`` must be on disk, and repair must close the call with the reference's
  synthetic result (``tests.reliability.slow_tool``);
- **escapes**: the sandbox attack tests (``tests/reliability/test_sandbox_*.py``: capabilities,
  host sockets, git metadata, secrets in the environment, shared temp folders, spill caps), as
  root and as a plain user where the machine allows, once through pytest.

Everything is seeded (``--seed``); a failure prints the seed and the command that replays it.
Exit status 0 when nothing failed. ``main()`` tolerates a ``--soak`` flag so that
``bench/__main__.py`` can pass its own arguments through.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # ``python bench/soak.py`` as well as ``-m``
    sys.path.insert(0, str(REPO))

from tests.reliability import support  # noqa: E402


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--soak", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trials", type=int, default=100, help="crash trials per store (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="first crash-trial seed; also seeds the rest")
    parser.add_argument("--stores", default="jsonl,sqlite", help="comma-separated stores (default jsonl,sqlite)")
    parser.add_argument("--workers", type=int, default=2, help="crash trials run at once (default 2)")
    parser.add_argument("--corruptions", type=int, default=3000, help="random corruptions (default 3000)")
    parser.add_argument("--races", type=int, default=20, help="lock races per store (default 20)")
    parser.add_argument("--slow-tool", type=int, default=5, help="slow-tool kill trials per store (default 5)")
    parser.add_argument(
        "--escape-rounds", type=int, default=3, help="rounds of the attack tests (default 3)"
    )
    parser.add_argument(
        "--skip", default="", help="comma-separated parts to skip: crash,sweep,corrupt,race,slowtool,escapes"
    )
    return parser


def _crash(args: argparse.Namespace, stores: list[str], base: Path) -> tuple[int, list[str], list[str]]:
    failures: list[str] = []
    lines: list[str] = []
    total = 0
    for store in stores:
        started = time.monotonic()
        done = 0

        def progress(trial: support.Trial, store: str = store) -> None:
            nonlocal done
            done += 1
            if trial.failures:
                print(f"  FAIL {trial.describe()}", flush=True)
            elif done % 10 == 0:
                print(f"  {store}: {done}/{args.trials} trials", flush=True)

        seeds = range(args.seed, args.seed + args.trials)
        trials = support.run_trials(base / store, store, seeds, workers=args.workers, on_done=progress)
        total += len(trials)
        bad = [t for t in trials if t.failures]
        failures += [
            f"{t.describe()}\n    replay: uv run python -m bench.soak --stores {store} --seed {t.seed} --trials 1"
            " --skip sweep,corrupt,race"
            for t in bad
        ]
        states = collections.Counter(t.state for t in trials)
        resumes = collections.Counter(t.resume for t in trials)
        closers = sum(t.closers for t in trials)
        lines.append(
            f"crash/{store}: {len(trials)} trials, {len(bad)} failed, {time.monotonic() - started:.0f}s; "
            f"resumed via {dict(resumes)}; {closers} crash closers checked"
        )
        lines += [f"    {count:4d} x {state}" for state, count in states.most_common()]
    return total, failures, lines


def _sweep() -> tuple[int, list[str], list[str]]:
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        data = support.build_base_log(Path(folder) / "log", open_turn=True)

    async def run(root: Path) -> tuple[collections.Counter[str], list[str]]:
        seen: collections.Counter[str] = collections.Counter()
        failures = []
        for offset in range(len(data) + 1):
            try:
                seen[await support.check_jsonl_corruption(root, data, data[:offset])] += 1
            except AssertionError as exc:
                failures.append(f"truncation at byte {offset}: {exc}")
        return seen, failures

    with tempfile.TemporaryDirectory(dir=support.scratch_dir()) as root:
        seen, failures = asyncio.run(run(Path(root)))
    lines = [f"truncation sweep: {len(data) + 1} offsets, {len(failures)} failed, {time.monotonic() - started:.0f}s"]
    lines += [f"    {count:5d} x {label}" for label, count in seen.most_common(8)]
    return len(data) + 1, failures, lines


def _corruptions(count: int, seed: int) -> tuple[int, list[str], list[str]]:
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        logs = {
            "closed": support.build_base_log(Path(folder) / "closed"),
            "open": support.build_base_log(Path(folder) / "open", open_turn=True),
        }
    rng = random.Random(f"corrupt:{seed}")
    seen: collections.Counter[str] = collections.Counter()
    failures: list[str] = []

    async def run(root: Path) -> None:
        for index in range(count):
            how = support.CORRUPTIONS[index % len(support.CORRUPTIONS)]
            which = rng.choice(sorted(logs))
            case_seed = rng.randrange(2**32)
            corrupted = support.corrupt(logs[which], how, random.Random(case_seed))
            try:
                label = await support.check_jsonl_corruption(root, logs[which], corrupted)
            except Exception as exc:
                failures.append(f"{how} of the {which} log (case seed {case_seed}): {type(exc).__name__}: {exc}")
                continue
            seen[f"{how}: {label.split(' (')[0].split(':')[0]}"] += 1

    with tempfile.TemporaryDirectory(dir=support.scratch_dir()) as root:
        asyncio.run(run(Path(root)))
    lines = [f"corruptions: {count} cases, {len(failures)} failed, {time.monotonic() - started:.0f}s"]
    lines += [f"    {n:5d} x {label}" for label, n in sorted(seen.items())]
    return count, failures, lines


def _races(count: int, stores: list[str], base: Path) -> tuple[int, list[str], list[str]]:
    failures: list[str] = []
    lines = []
    total = 0
    for store in stores:
        started = time.monotonic()
        cwd = base / f"race-{store}"
        cwd.mkdir(parents=True)
        config, session_id = support.start_session(cwd, store)
        bad = 0
        for round_ in range(count):
            problems = support.race_once(cwd, config, session_id, f"round {round_}")
            total += 1
            if problems:
                bad += 1
                failures.append(f"race/{store} round {round_}: {problems}")
        snap = support.snapshot(cwd, store)
        events = [support.decode(line) for line in snap.lines]
        if [e["seq"] for e in events] != list(range(len(events))) or support.expected_closers(events):
            failures.append(f"race/{store}: the log is not contiguous and closed after the races")
        expected = ["hello"] + [f"round {i}" for i in range(count)]
        if support.user_lines(snap) != expected:
            failures.append(f"race/{store}: turns {support.user_lines(snap)} != {expected}")
        lines.append(f"lock races/{store}: {count} rounds, {bad} failed, {time.monotonic() - started:.0f}s")
    return total, failures, lines


def _slow_tool(args: argparse.Namespace, stores: list[str], base: Path) -> tuple[int, list[str], list[str]]:
    from tests.reliability.slow_tool import slow_tool_trial

    failures: list[str] = []
    lines = []
    total = 0
    for store in stores:
        started = time.monotonic()
        bad = 0
        for seed in range(args.seed, args.seed + args.slow_tool):
            try:
                trial = slow_tool_trial(base / "slow-tool", store, seed)
            except Exception as exc:  # a harness failure is a failed trial, with its seed
                trial = support.Trial(store, seed, "cli")
                trial.failures.append(f"trial raised {type(exc).__name__}: {exc}")
            total += 1
            if trial.failures:
                bad += 1
                print(f"  FAIL {trial.describe()}", flush=True)
                failures.append(f"slow-tool/{store} seed {seed}: {trial.failures}")
        lines.append(
            f"slow-tool kills/{store}: {args.slow_tool} trials, {bad} failed, {time.monotonic() - started:.0f}s"
        )
    return total, failures, lines


def _escapes(rounds: int) -> tuple[int, list[str], list[str]]:
    """Every test marked ``attack`` (the escape, leak and hostile-input attempts), ``rounds`` times,
    both tiers, through the real CLI as the suite runs them."""
    failures: list[str] = []
    for n in range(rounds):
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-m", "attack", "--full", "-q", "-n", "2", "-p", "no:randomly"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"  escapes round {n + 1}: {summary} ({time.monotonic() - started:.0f}s)", flush=True)
        if proc.returncode != 0:
            failures.append(f"escapes round {n + 1}: {summary}\n{proc.stdout[-4000:]}")
    return rounds, failures, [f"escapes: {rounds} rounds of the attack tests, {len(failures)} failed"]


def main(argv: Sequence[str] | None = None) -> int:
    args, unknown = _parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if unknown:
        print(f"soak: ignoring unknown arguments {unknown}", file=sys.stderr)
    stores = [s for s in args.stores.split(",") if s]
    skip = set(filter(None, args.skip.split(",")))
    started = time.monotonic()
    report: list[str] = []
    failures: list[str] = []
    base = Path(tempfile.mkdtemp(prefix="dsh-soak-"))
    print(f"soak: seed {args.seed}, stores {stores}, scratch {base}", flush=True)
    try:
        parts = [
            ("crash", lambda: _crash(args, stores, base)),
            ("sweep", _sweep),
            ("corrupt", lambda: _corruptions(args.corruptions, args.seed)),
            ("race", lambda: _races(args.races, stores, base)),
            ("slowtool", lambda: _slow_tool(args, stores, base)),
            ("escapes", lambda: _escapes(args.escape_rounds)),
        ]
        for name, run in parts:
            if name in skip:
                continue
            print(f"soak: {name} ...", flush=True)
            _, failed, lines = run()
            failures += failed
            report += lines
            print("\n".join(lines), flush=True)
    finally:
        if not failures:
            shutil.rmtree(base, ignore_errors=True)
    print("\n== soak summary ==")
    print("\n".join(report))
    print(f"total: {len(failures)} failures in {time.monotonic() - started:.0f}s")
    if failures:
        print(f"scratch kept for inspection: {base}")
        for failure in failures:
            print(f"FAIL {failure}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
