"""Workspace-tool overhead: ``python -m bench.workspace_tools [--quick] [--json]``.

What is timed (medians over repeated calls, after a warm-up):

- ``read``: one ``read`` of a 200-line file through the whole tool pipeline
  (``ctx.tools.execute``: lookup, approval gate check, argument checks, path resolution, the
  read-before-write ledger, the line-numbered envelope) ÷ a bare ``Path.read_text()`` plus
  ``splitlines()`` of the same file.
- ``bash -c true``: one ``bash`` call (spawn with output to files, wait, render) unconfined
  (``danger-full-access``) and sandboxed (``workspace-write`` through bubblewrap) ÷ a bare
  ``subprocess.run(["bash", "-c", "true"])``; ``bwrap_bare`` divides the sandboxed call by the
  same bubblewrap command line run bare (the tool's own share of the sandboxed cost).
- ``grep``: one ``grep`` for a pattern present in 1% of a 10,000-file tree (the pipeline plus
  ripgrep's JSON output parsed and grouped) ÷ a bare ``rg -n`` over the same tree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import dsh.tools.registry as tools_plugin
from bench._util import machine, median, scratch_dir
from dsh.runtime import AbortController, Context
from dsh.session import Session
from dsh.tools.workspace import plugin as workspace_plugin
from dsh.tools.workspace.sandbox import SandboxPolicy, bwrap_status
from dsh.tools.workspace.search import find_rg


class _Agent:
    def __init__(self, root: Path) -> None:
        self.session = Session("bench", header={"cwd": str(root)})
        self.session.append("turn/start", {"turn": 1, "trigger": {"kind": "user"}})

    def inject(self, *args: Any, **kwargs: Any) -> None:
        pass


async def _ctx(root: Path, spill: Path, **config: Any) -> Context:
    ctx = Context()
    await ctx.plugin(tools_plugin)
    await ctx.plugin(workspace_plugin, {"spillDir": str(spill), **config})
    return ctx


async def _time_calls(ctx: Context, agent: _Agent, name: str, args: dict[str, Any], n: int) -> float:
    signal = AbortController().signal
    samples = []
    for i in range(n + 1):
        start = time.perf_counter()
        result = await ctx.tools.execute(call_id=f"c{i}", name=name, arguments=args, agent=agent, signal=signal)
        elapsed = time.perf_counter() - start
        assert not result.is_error, result.content
        if i:
            samples.append(elapsed)
    return median(samples)


def _bare(fn: Any, n: int) -> float:
    samples = []
    for i in range(n + 1):
        start = time.perf_counter()
        fn()
        if i:
            samples.append(time.perf_counter() - start)
    return median(samples)


async def run(quick: bool) -> dict[str, Any]:
    reps = 50 if quick else 300
    spawns = 10 if quick else 40
    out: dict[str, Any] = {"machine": machine()}
    with scratch_dir("ws") as scratch:
        root = Path(scratch) / "ws"
        root.mkdir()
        agent = _Agent(root)
        spill = Path(scratch) / "spill"
        source = root / "file.py"
        source.write_text("".join(f"line {i} = {i * 7} # some text here\n" for i in range(200)))

        ctx = await _ctx(root, spill, sandbox="danger-full-access", askUnconfinedBash=False)
        tool_read = await _time_calls(ctx, agent, "read", {"file_path": "file.py"}, reps)
        bare_read = _bare(lambda: source.read_text().splitlines(), reps)
        out["read"] = {"tool_us": tool_read * 1e6, "bare_us": bare_read * 1e6, "ratio": tool_read / bare_read}

        bare_bash = _bare(lambda: subprocess.run(["bash", "-c", "true"], check=True), spawns)
        plain = await _time_calls(ctx, agent, "bash", {"command": "true", "description": "b"}, spawns)
        out["bash_unconfined"] = {"tool_ms": plain * 1e3, "bare_ms": bare_bash * 1e3, "ratio": plain / bare_bash}
        await ctx.dispose()
        if bwrap_status() is None:
            sandboxed_ctx = await _ctx(root, spill)
            boxed = await _time_calls(sandboxed_ctx, agent, "bash", {"command": "true", "description": "b"}, spawns)
            argv = SandboxPolicy("workspace-write", root).wrap(["bash", "-c", "true"], workdir=root, session="bench")
            bare_bwrap = _bare(lambda: subprocess.run(argv, check=True), spawns)
            out["bash_sandboxed"] = {"tool_ms": boxed * 1e3, "bare_ms": bare_bash * 1e3, "ratio": boxed / bare_bash}
            out["bwrap_bare"] = {"tool_ms": boxed * 1e3, "bare_ms": bare_bwrap * 1e3, "ratio": boxed / bare_bwrap}
            await sandboxed_ctx.dispose()

        tree = root / "tree"
        for i in range(10_000):
            folder = tree / f"d{i // 100:03}"
            if i % 100 == 0:
                folder.mkdir(parents=True)
            body = "needle here\n" if i % 100 == 7 else ""
            (folder / f"f{i:05}.txt").write_text(f"plain text {i}\n{body}more text\n")
        ctx = await _ctx(root, spill)
        greps = 5 if quick else 20
        tool_grep = await _time_calls(ctx, agent, "grep", {"pattern": "needle", "path": "tree"}, greps)
        rg = find_rg()
        bare_grep = _bare(lambda: subprocess.run([rg, "-n", "needle", str(tree)], check=True, capture_output=True), greps)
        out["grep_10k_files"] = {"tool_ms": tool_grep * 1e3, "bare_ms": bare_grep * 1e3, "ratio": tool_grep / bare_grep}
        await ctx.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(run(args.quick))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        if key == "machine":
            continue
        unit = "us" if "tool_us" in value else "ms"
        tool = value.get("tool_us", value.get("tool_ms"))
        bare = value.get("bare_us", value.get("bare_ms"))
        print(f"{key:<16} tool {tool:9.2f} {unit}   bare {bare:9.2f} {unit}   ratio {value['ratio']:6.2f}")


if __name__ == "__main__":
    main()
