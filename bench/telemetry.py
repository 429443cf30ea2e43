"""loop_telemetry: the harness time per step with OpenTelemetry tracing on, against off.

The ``loop`` workload (:mod:`bench.agent_loop`: one agent, 1,000 turns of a tool-call step and a
text step, time-context, JSONL with fsync at every turn end, a zero-latency scripted model),
run alternately without and with the ``telemetry`` plugin (``dsh.observability.plugin``, its
defaults: spans batched by the SDK's ``BatchSpanProcessor``, metrics on) exporting over
OTLP/HTTP to a receiver on loopback in this process's own thread (a ``ThreadingHTTPServer``
that reads each request body and answers 200). Each turn makes 4 spans (``invoke_agent``, two
``chat``, one ``execute_tool``). The plugin's disposal (the final flush) is outside the timed
turns. Full run: 3 rounds of off/on, medians; ``quick``: 1 round of 300 turns. Reported:
``ms_per_step_off``, ``ms_per_step_on``, ``overhead_ms_per_step`` (on − off),
``overhead_ratio`` (on ÷ off) and the spans and bytes the receiver got (``spans_expected``:
4 per turn; fewer would mean the bounded queue dropped some).
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


def run(quick: bool) -> dict[str, Any]:
    turns = 300 if quick else agent_loop.TURNS
    receiver = _Receiver()
    off: list[float] = []
    on: list[float] = []
    spans: list[int] = []
    try:
        for _ in range(1 if quick else 3):
            with scratch_dir("loop-off") as root:
                off.append(asyncio.run(agent_loop._measure(root, turns))["ms_per_step"])
            mount, counted = _spans(receiver.url)
            with scratch_dir("loop-on") as root:
                on.append(asyncio.run(agent_loop._measure(root, turns, mount))["ms_per_step"])
            spans.extend(counted)
    finally:
        receiver.close()
    ms_off, ms_on = median(off), median(on)
    return {
        "ms_per_step_off": round(ms_off, 4),
        "ms_per_step_on": round(ms_on, 4),
        "overhead_ms_per_step": round(ms_on - ms_off, 4),
        "overhead_ratio": round(ms_on / ms_off, 3),
        "runs_off": off,
        "runs_on": on,
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
