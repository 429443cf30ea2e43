"""loop_telemetry: the harness time per step with OpenTelemetry tracing on, against off.

The ``loop`` workload (:mod:`bench.agent_loop`: one agent, 1,000 turns of a tool-call step and a
text step, time-context, JSONL with fsync at every turn end, a zero-latency scripted model),
run alternately without and with the ``telemetry`` plugin (``dsh.observability.plugin``, its
defaults: spans batched by the SDK's ``BatchSpanProcessor``, metrics on) exporting over
OTLP/HTTP to a receiver on loopback in this process's own thread (a ``ThreadingHTTPServer``
that reads each request body and answers 200). Each turn makes 4 spans (``invoke_agent``, two
``chat``, one ``execute_tool``). The plugin's disposal (the final flush) is outside the timed
turns. Full run: 3 rounds of off/on, medians; ``quick``: 1 round of 300 turns. Reported:
``ms_per_step_off``, ``ms_per_step_on``, ``overhead_ms_per_step`` (on − off), the same net of
the store's write and fsync time (``net_…``: the harness time, as ``loop`` reports it),
``overhead_ratio`` (on ÷ off) and the spans and bytes the receiver got (``spans_expected``:
4 per turn; fewer would mean the bounded queue dropped some). Because wall time on a shared
machine moves with its neighbours, ``loop_thread_cpu_ms_per_step`` measures the part that runs
on the event loop alone: the events of a recorded 100-turn run replayed through the same
derivation and SDK spans (10 times, 3 rounds, median), in CPU time of the feeding thread.
"""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench import agent_loop
from bench._util import median, scratch_dir
from dsh.runtime import Context


class _Receiver:
    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.requests += 1
                receiver.bytes += len(body)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _spans(url: str) -> tuple[Any, list[int]]:
    """A mount function for the telemetry plugin, and a list that receives the span count."""
    from dsh.observability import plugin

    counted: list[int] = []

    async def mount(ctx: Context) -> None:
        await ctx.plugin(plugin, {"endpoint": url})
        telemetry = ctx.require(plugin.TELEMETRY)
        provider = telemetry.pipeline.tracer_provider
        original = provider._active_span_processor.on_end
        seen = [0]

        def on_end(span: Any) -> None:
            seen[0] += 1
            original(span)

        provider._active_span_processor.on_end = on_end  # type: ignore[method-assign]
        ctx.defer(lambda: counted.append(seen[0]))

    return mount, counted


def _loop_thread_cost(url: str, events: list[Any], repeats: int) -> float:
    """CPU time (``time.thread_time``) the event loop's thread spends per step deriving and
    starting/ending SDK spans, over ``repeats`` replays of one recorded session's events: the
    part of tracing that runs on the loop, measured apart from the export thread and from
    whatever else the shared machine runs."""
    import time

    from dsh.observability import otel
    from dsh.observability.spans import SessionTracer

    pipeline = otel.pipeline(url, metrics=False)
    sink = pipeline.sink()
    steps = sum(1 for e in events if e.type == "step/start") * repeats
    start = time.thread_time()
    for index in range(repeats):
        tracer = SessionTracer(f"bench-session-{index}", sink)
        for event in events:
            tracer.feed(event.type, event.time, event.data)
        tracer.close()
    spent = time.thread_time() - start
    pipeline.shutdown(5000)
    return spent / steps * 1000


def run(quick: bool) -> dict[str, Any]:
    import importlib.util

    if importlib.util.find_spec("opentelemetry.sdk") is None:
        return {"skipped": "needs the otel extra: uv run --extra otel python -m bench --only loop_telemetry"}
    turns = 300 if quick else agent_loop.TURNS
    receiver = _Receiver()
    off: list[float] = []
    on: list[float] = []
    off_net: list[float] = []
    on_net: list[float] = []
    spans: list[int] = []
    try:
        for _ in range(1 if quick else 3):
            with scratch_dir("loop-off") as root:
                figures = asyncio.run(agent_loop._measure(root, turns))
            off.append(figures["ms_per_step"])
            off_net.append(figures["ms_per_step_excluding_flush"])
            mount, counted = _spans(receiver.url)
            with scratch_dir("loop-on") as root:
                figures = asyncio.run(agent_loop._measure(root, turns, mount))
            on.append(figures["ms_per_step"])
            on_net.append(figures["ms_per_step_excluding_flush"])
            spans.extend(counted)
        recorded: list[Any] = []

        async def record(ctx: Context) -> None:
            ctx.on("session/event", lambda _session, event: recorded.append(event))

        with scratch_dir("loop-rec") as root:
            asyncio.run(agent_loop._measure(root, 100, record))
        loop_ms = median([_loop_thread_cost(receiver.url, recorded, 3 if quick else 10) for _ in range(3)])
    finally:
        receiver.close()
    ms_off, ms_on = median(off), median(on)
    net_off, net_on = median(off_net), median(on_net)
    return {
        "net_ms_per_step_off": round(net_off, 4),
        "net_ms_per_step_on": round(net_on, 4),
        "net_overhead_ms_per_step": round(net_on - net_off, 4),
        "ms_per_step_off": round(ms_off, 4),
        "ms_per_step_on": round(ms_on, 4),
        "overhead_ms_per_step": round(ms_on - ms_off, 4),
        "overhead_ratio": round(ms_on / ms_off, 3),
        "loop_thread_cpu_ms_per_step": round(loop_ms, 4),
        "runs_off": off,
        "runs_on": on,
        "runs_net_off": off_net,
        "runs_net_on": on_net,
        "turns": turns,
        "spans_ended_per_run": spans,
        "spans_expected": turns * 4,
        "export_requests": receiver.requests,
        "export_bytes": receiver.bytes,
    }


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run("--quick" in sys.argv), indent=2))
