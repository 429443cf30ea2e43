"""Cold start: from process start to ``ready.`` for ``dsh chat`` (issue 14).

Timed: spawning the installed ``dsh`` script (``dsh chat --plain --root <scratch>``, stdin a
pipe held open) until ``ready.`` appears on its stdout; then stdin is closed and the process
waited for. The same spawn of ``python -c pass`` is timed alongside, interleaved, so
``ratio_vs_bare_python`` stays meaningful on a loaded machine. Median of the runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from bench._util import median, scratch_dir

# As a user's machine runs it: bytecode cached after the first start (some CI machines set
# PYTHONDONTWRITEBYTECODE, which would time a recompile of dsh and its dependencies instead).
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _ready_seconds(argv: list[str], marker: bytes | None) -> float:
    began = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_ENV)
    assert proc.stdout is not None and proc.stdin is not None
    elapsed = 0.0
    if marker is None:
        proc.wait()
        elapsed = time.perf_counter() - began
    else:
        seen = b""
        while marker not in seen:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"{argv[0]} exited before printing {marker!r}")
            seen += chunk
        elapsed = time.perf_counter() - began
        proc.stdin.close()
        proc.wait(timeout=60)
    return elapsed


def run(quick: bool) -> dict[str, Any]:
    script = os.path.join(os.path.dirname(sys.executable), "dsh")
    runs = 5 if quick else 15
    dsh_times: list[float] = []
    bare_times: list[float] = []
    with scratch_dir("startup") as root:
        argv = [script, "chat", "--plain", "--root", os.path.join(root, "sessions")]
        _ready_seconds(argv, b"ready.")  # warm the page cache and bytecode
        for _ in range(runs):
            bare_times.append(_ready_seconds([sys.executable, "-c", "pass"], None))
            dsh_times.append(_ready_seconds(argv, b"ready."))
    ready, bare = median(dsh_times), median(bare_times)
    return {
        "ready_seconds": ready,
        "bare_python_seconds": bare,
        "ratio_vs_bare_python": ready / bare if bare else None,
        "runs": runs,
    }
