"""Small helpers shared by the benchmarks: statistics, a scratch directory, the machine."""

from __future__ import annotations

import contextlib
import gc
import os
import platform
import shutil
import statistics
import tempfile
from collections.abc import Iterator, Sequence

#: Scratch files go on a real disk (``/tmp`` here is ext4), so fsync costs what it costs.
SCRATCH_PARENT = os.environ.get("DSH_BENCH_TMP") or tempfile.gettempdir()

PG_DSN = os.environ.get("DSH_TEST_DATABASE_URL", "postgresql://127.0.0.1:5432/test")


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in [0, 1]) of a non-empty sample."""
    ordered = sorted(values)
    rank = max(1, round(fraction * len(ordered) + 0.5 - 1e-9))
    return float(ordered[min(rank, len(ordered)) - 1])


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    path = tempfile.mkdtemp(prefix=f"dsh-bench-{prefix}-", dir=SCRATCH_PARENT)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def gc_off() -> Iterator[None]:
    """Pause the cyclic GC (as ``timeit`` does) around a timed region."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as file:
        for line in file:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{os.cpu_count()} cores ({cpu}), {platform.system()} {platform.release()}, "
        f"CPython {platform.python_version()}"
    )
