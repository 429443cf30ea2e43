"""The slow-tool kill trial: ``dsh chat`` SIGKILLed while a tool runs, then ``--continue``d.

A scripted loopback OpenAI-compatible model (``tests/llm/sse_server.py``) answers the first
request with one call to ``slow``, a tool from a ``.py`` plugin in the test composition that
writes a marker file (its side effect) and then sleeps far longer than the trial. Once the
marker exists the process is killed at a seeded moment, then resumed with ``dsh chat --continue``.

What must hold: the turn on disk has the ``assistant/message`` with the call and its
``tool/call`` (the loop checkpoints both before the tool starts); repair closes the call with the
reference's synthetic result, ``step/end`` and ``turn/end {interrupted}``; seqs are contiguous;
and the resumed request shows the model the interrupted result. ``test_crash_slow_tool.py`` runs a
few trials per store; ``python -m bench.soak`` runs many more.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.llm.sse_server import Reply, SSEServer, chunk
from tests.reliability.support import (
    INTERRUPTED_TEXT,
    Trial,
    decode,
    dsh_env,
    run_dsh,
    snapshot,
    wait_for,
)

MODEL = "loop-model"
NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

SLOW_TOOL = '''\
"""slow-tool: a tool ``slow`` that records that it started, then takes ``seconds`` to finish."""

import asyncio
from pathlib import Path

from dsh.tools import define_tool

name = "slow-tool"
inject = ["tools"]


def apply(ctx, config):
    folder = Path(config["markers"])

    async def run(args, call):
        (folder / f"started-{call.call_id}").write_text(str(args.get("seconds")))
        await asyncio.sleep(args["seconds"])  # the slow tool itself (scripted)
        return [{"type": "text", "text": "slow done"}]

    tool = define_tool(
        name="slow",
        description="Sleep, then say so.",
        parameters={
            "type": "object",
            "properties": {"seconds": {"type": "number"}},
            "required": ["seconds"],
        },
        execute=run,
    )
    ctx.defer(ctx.tools.register(tool))
'''


def write_composition(folder: Path, base_url: str, store: str) -> Path:
    (folder / "slow_tool.py").write_text(SLOW_TOOL, encoding="utf-8")
    markers = folder / "markers"
    markers.mkdir()
    config = folder / "dsh.yml"
    config.write_text(
        "- id: model\n"
        "  name: openai-llm\n"
        f"  config: {{baseURL: '{base_url}', apiKey: not-needed, models: [{MODEL}], maxRetries: 0}}\n"
        "- id: slow-tool\n"
        "  name: ./slow_tool.py\n"
        f"  config: {{markers: '{markers}'}}\n"
        "- id: time-context\n"
        "  name: time-context\n"
        "- id: app\n"
        "  name: stdio-app\n"
        "  config:\n"
        f"    model: {MODEL}\n"
        f"    store: {store}\n"
        "    persistenceRoot: ./.sessions\n",
        encoding="utf-8",
    )
    return config


def _script(server: SSEServer, call_id: str, seconds: float) -> None:
    args = json.dumps({"seconds": seconds})
    call = {"index": 0, "id": call_id, "type": "function", "function": {"name": "slow", "arguments": args}}
    server.push(
        Reply.sse([chunk(role="assistant", content="Running it."), chunk(tool_calls=[call]), chunk(finish="tool_calls")]),
        Reply.sse([chunk(content="Noted: it may have run.", finish="stop")]),
    )


def slow_tool_trial(base: Path, store: str, seed: int) -> Trial:
    rng = random.Random(f"slow-tool:{store}:{seed}")
    trial = Trial(store, seed, "cli")
    workdir = base / f"slow-tool-{store}-{seed}"
    workdir.mkdir(parents=True)
    call_id = f"call_slow_{seed}"
    with SSEServer() as server:
        config = write_composition(workdir, server.base_url, store)
        _script(server, call_id, 60)
        proc = subprocess.Popen(
            [sys.executable, "-m", "dsh", "chat", "--config", str(config), "--plain"],
            cwd=workdir, env=dsh_env(**NO_PROXY),
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        try:
            assert proc.stdin is not None
            proc.stdin.write(b"run the slow tool\n")
            proc.stdin.flush()
            marker = workdir / "markers" / f"started-{call_id}"
            wait_for(lambda: marker.exists() or proc.poll() is not None, 60, "the slow tool to start")
            if proc.poll() is not None:
                trial.failures.append(f"dsh exited {proc.returncode} before the tool ran")
                return trial
            trial.kill_after = rng.uniform(0.0, 0.3)
            time.sleep(trial.kill_after)  # deliberate: the kill lands a random time into the tool
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdin, proc.stderr):
                if pipe is not None:
                    pipe.close()
        before = snapshot(workdir, store)
        trial.kept = len(before.lines)
        events = [decode(line) for line in before.lines]
        trial.failures += _check_before(events, call_id)
        result = run_dsh(
            ["chat", "--config", str(config), "--continue", "--plain"],
            workdir, stdin="did it run?\n", timeout=120, **NO_PROXY,
        )
        if result.returncode != 0:
            trial.failures.append(f"--continue exited {result.returncode}: {result.stderr.strip()[-500:]}")
            return trial
        after = [decode(line) for line in snapshot(workdir, store).lines]
        trial.failures += _check_after(events, after, call_id)
        if len(server.requests) != 2:
            trial.failures.append(f"expected 2 model requests, saw {len(server.requests)}")
        else:
            wire = server.requests[1].json["messages"]
            tool_messages = [m for m in wire if m.get("role") == "tool"]
            expected = {"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED_TEXT}
            if tool_messages != [expected]:
                trial.failures.append(f"the resumed request did not tell the model: {tool_messages}")
    trial.closers = 3
    trial.state = "in tool"
    return trial


def _check_before(events: list[dict[str, Any]], call_id: str) -> list[str]:
    types = [e["type"] for e in events]
    problems = []
    if "assistant/message" not in types:
        problems.append(f"no assistant/message on disk after the kill: {types}")
    calls = [e for e in events if e["type"] == "tool/call"]
    if [c["data"]["callId"] for c in calls] != [call_id]:
        problems.append(f"the tool/call did not reach the disk before the tool ran: {types}")
    if "tool/result" in types or "turn/end" in types:
        problems.append(f"the turn was closed although the tool never finished: {types}")
    return problems


def _check_after(before: list[dict[str, Any]], after: list[dict[str, Any]], call_id: str) -> list[str]:
    problems = []
    if [json.dumps(e, sort_keys=True) for e in after[: len(before)]] != [
        json.dumps(e, sort_keys=True) for e in before
    ]:
        problems.append("the committed prefix changed on resume")
    if [e["seq"] for e in after] != list(range(len(after))):
        problems.append("seqs are not contiguous after resume")
    closers = after[len(before) : len(before) + 3]
    call_seq = next((e["seq"] for e in before if e["type"] == "tool/call"), None)
    want = [
        (
            "tool/result",
            {
                "turn": 1, "step": 1, "callId": call_id,
                "content": [{"type": "text", "text": INTERRUPTED_TEXT}], "isError": True,
                "error": {"name": "InterruptedError", "code": "interrupted"},
            },
            [call_seq],
        ),
        ("step/end", {"turn": 1, "step": 1}, None),
        ("turn/end", {"turn": 1, "reason": {"kind": "interrupted"}}, None),
    ]
    got = [(e["type"], e["data"], e.get("sourceEventSeqs")) for e in closers]
    if got != want:
        problems.append(f"crash closers {got} != {want}")
    if not any(e["type"] == "turn/end" and e["data"]["turn"] == 2 for e in after):
        problems.append("the resumed turn 2 did not end")
    return problems
