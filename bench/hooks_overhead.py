"""PreToolUse hook overhead: ``python -m bench.hooks_overhead [--quick] [--json]``.

What is timed (medians over repeated calls, after a warm-up): one call of the ``echo`` tool
through the whole registry pipeline (``ctx.tools.execute``) with

- no hooks plugin (the baseline);
- the ``hooks`` plugin mounted and a user settings file whose only hook is a no-op
  ``PreToolUse`` command (``true``, matcher ``*``): the added time is the cost of one hook run
  (``/bin/sh`` spawned in its own process group, the event JSON on stdin, both streams read,
  exit code parsed, ``hook/invoked`` + ``hook/result`` appended);
- the same with matcher ``Bash``, which the echo call does not match (the selection cost alone).

A bare ``subprocess.run(["/bin/sh", "-c", "true"])`` is the floor a hook run cannot go below.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import dsh.tools.registry as tools_plugin
from bench._util import machine, median, scratch_dir
from dsh.runtime import AbortController, Context
from dsh.session import Session
from dsh.tools import echo as echo_plugin


class _Agent:
    def __init__(self, root: Path) -> None:
        self.session = Session("bench", header={"cwd": str(root)})
        self.session.append("turn/start", {"turn": 1, "trigger": {"kind": "user"}})

    def inject(self, *args: Any, **kwargs: Any) -> None:
        pass


async def _ctx(with_hooks: bool) -> Context:
    ctx = Context()
    await ctx.plugin(tools_plugin)
    await ctx.plugin(echo_plugin)
    if with_hooks:
        from dsh.plugins import hooks

        await ctx.plugin(hooks, {})
    return ctx


async def _time(ctx: Context, agent: _Agent, n: int) -> float:
    signal = AbortController().signal
    samples = []
    for i in range(n + 1):
        start = time.perf_counter()
        result = await ctx.tools.execute(call_id=f"c{i}", name="echo", arguments={"text": "x"}, agent=agent, signal=signal)
        elapsed = time.perf_counter() - start
        assert not result.is_error, result.content
        if i:
            samples.append(elapsed)
    return median(samples)


def _settings(home: Path, matcher: str) -> None:
    hooks = {"PreToolUse": [{"matcher": matcher, "hooks": [{"type": "command", "command": "true"}]}]}
    (home / "settings.json").write_text(json.dumps({"hooks": hooks}))


async def run(quick: bool) -> dict[str, Any]:
    reps = 30 if quick else 200
    out: dict[str, Any] = {"machine": machine()}
    with scratch_dir("hooks") as scratch:
        root = Path(scratch)
        home = root / "home"
        home.mkdir()
        saved = {k: os.environ.get(k) for k in ("DSH_HOME", "CLAUDE_CONFIG_DIR")}
        os.environ["DSH_HOME"] = str(home)
        os.environ["CLAUDE_CONFIG_DIR"] = str(root / "claude")
        cwd = os.getcwd()
        os.chdir(root)
        try:
            agent = _Agent(root)
            ctx = await _ctx(False)
            base = await _time(ctx, agent, reps)
            await ctx.dispose()
            _settings(home, "*")
            ctx = await _ctx(True)
            hooked = await _time(ctx, agent, reps)
            await ctx.dispose()
            _settings(home, "Bash")
            ctx = await _ctx(True)
            unmatched = await _time(ctx, agent, reps)
            await ctx.dispose()
        finally:
            os.chdir(cwd)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    samples = []
    for i in range(reps + 1):
        start = time.perf_counter()
        subprocess.run(["/bin/sh", "-c", "true"], check=True)
        if i:
            samples.append(time.perf_counter() - start)
    bare = median(samples)
    out.update(
        {
            "calls": reps,
            "echo_no_hooks_ms": round(base * 1e3, 4),
            "echo_noop_pretooluse_ms": round(hooked * 1e3, 3),
            "overhead_per_call_ms": round((hooked - base) * 1e3, 3),
            "echo_unmatched_hook_ms": round(unmatched * 1e3, 4),
            "unmatched_overhead_us": round((unmatched - base) * 1e6, 2),
            "bare_sh_true_ms": round(bare * 1e3, 3),
            "overhead_vs_bare_sh": round((hooked - base) / bare, 2),
        }
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hooks_overhead")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(run(args.quick))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        if key != "machine":
            print(f"{key:<28} {value}")


if __name__ == "__main__":
    main()
