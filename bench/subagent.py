"""``python -m bench.subagent``: what delegation costs.

One ``Context`` with the agent spine, ``time-context``, the ``jsonl-sessions`` store (fsync at
each turn end, on ext4) and the ``subagent`` plugin (``agents: false``, ``maxParallel`` = N). The
model is an in-process adapter: the parent's first step calls ``subagent`` N times in one
message, each child answers in one text step, the parent then answers. ``DSH_DEV_CHECKS`` is
removed first.

- **overhead**: per child, from its ``session/created`` (the child session is published, its
  link event next) to its first model request reaching the adapter (the agent is created, the
  prompt is queued, the driver opens the turn, the approval notice and the time reading are
  appended, the request is derived, ``step/start`` is checkpointed to disk). N = 1, repeated
  ``--rounds`` times (fresh context each); median and p95.
- **memory per concurrent child**: N = ``--children`` children held at once inside their first
  model request (the adapter waits until all N have asked); the growth of the Python heap
  (``tracemalloc``, traced from before the parent's turn) and of the process RSS, divided by N.

``--json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

from bench._util import machine, median, percentile, scratch_dir
from dsh.agent.sessions import SESSION_CREATED
from dsh.llm.types import LlmRequest, StreamChunk
from dsh.persistence import jsonl
from dsh.plugins import time_context
from dsh.plugins.subagent import plugin as subagent_plugin
from dsh.plugins.subagent.service import GENERAL_SYSTEM
from dsh.runtime import Context
from dsh.testing import Reply, ScriptedAdapter, mount_agent_loop

MODEL = "scripted"


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class _Model(ScriptedAdapter):
    """Parent: N ``subagent`` calls, then a reply. Child: one reply, after the gate opens."""

    def __init__(self, children: int) -> None:
        super().__init__(default=Reply(text="ok"))
        self.children = children
        self.first_request: dict[str, float] = {}
        self.gate = asyncio.Event()
        self.hold = False

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        system = request.system or ""
        if system.startswith(GENERAL_SYSTEM):
            self.first_request.setdefault(str(request.session_id), time.perf_counter())
            if self.hold:
                if len(self.first_request) >= self.children:
                    self.gate.set()
                await self.gate.wait()
            reply = Reply(text="child result")
        elif any(b.get("type") == "tool-result" for m in request.messages for b in m["content"]):
            reply = Reply(text="parent done")
        else:
            calls = [(f"call-{i}", "subagent", {"description": f"task {i}", "prompt": f"do task {i}"}) for i in range(self.children)]
            reply = Reply(tool_calls=calls)
        self.add(reply)
        async for chunk in super().stream(request):
            yield chunk


async def _compose(root: str, children: int) -> tuple[Context, _Model]:
    ctx = Context()
    await mount_agent_loop(ctx)
    model = _Model(children)
    model.register(ctx, MODEL)
    await ctx.plugin(time_context, None)
    await ctx.plugin(jsonl, {"root": root})
    await ctx.plugin(subagent_plugin, {"agents": False, "maxParallel": max(children, 1), "enableRunInBackground": False})
    return ctx, model


async def _overhead_round() -> float:
    with scratch_dir("subagent") as root:
        ctx, model = await _compose(root, 1)
        created: dict[str, float] = {}
        ctx.on(SESSION_CREATED, lambda e: created.setdefault(e.session.id, time.perf_counter()))
        from dsh.agent.loop import AGENT_LOOP

        agent = ctx.require(AGENT_LOOP).create("main", model=MODEL, cwd=root)
        agent.send([{"type": "text", "text": "go"}])
        await agent.when_idle()
        await ctx.dispose()
        (child,) = model.first_request
        return (model.first_request[child] - created[child]) * 1000


async def _memory(children: int) -> dict[str, float]:
    with scratch_dir("subagent-mem") as root:
        ctx, model = await _compose(root, children)
        from dsh.agent.loop import AGENT_LOOP

        agent = ctx.require(AGENT_LOOP).create("main", model=MODEL, cwd=root)
        model.hold = True
        tracemalloc.start()
        base_heap = tracemalloc.get_traced_memory()[0]
        base_rss = _rss_kib()
        agent.send([{"type": "text", "text": "go"}])
        while not model.gate.is_set():
            await asyncio.sleep(0.005)
        heap = tracemalloc.get_traced_memory()[0] - base_heap
        rss = _rss_kib() - base_rss
        tracemalloc.stop()
        await agent.when_idle()
        await ctx.dispose()
    return {"children": children, "heap_kib_per_child": heap / 1024 / children, "rss_kib_per_child": rss / children}


async def run(quick: bool = False, *, rounds: int = 30, children: int = 16) -> dict[str, Any]:
    os.environ.pop("DSH_DEV_CHECKS", None)
    rounds = 5 if quick else rounds
    await _overhead_round()  # warm-up: imports and first-use caches
    times = [await _overhead_round() for _ in range(rounds)]
    memory = await _memory(children)
    return {
        "overhead_ms_median": median(times),
        "overhead_ms_p95": percentile(times, 0.95),
        "rounds": rounds,
        **memory,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.subagent", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--children", type=int, default=16)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(run(args.quick, rounds=args.rounds, children=args.children))
    if args.json:
        print(json.dumps({"machine": machine(), **result}))
    else:
        for key, value in result.items():
            print(f"{key:24} {value:.3f}" if isinstance(value, float) else f"{key:24} {value}")


if __name__ == "__main__":
    main()
