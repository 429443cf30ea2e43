"""``python -m bench.acp_server``: ``dsh acp`` as an editor sees it, through the acp package's client.

Two figures, each from a real ``dsh acp`` subprocess on stdio:

- **first chunk**: the time from sending ``session/prompt`` to receiving the first
  ``agent_message_chunk``, with the keyless ``mock-echo`` model at ``delayMs: 0`` and
  time-context on (so every prompt pays a reading, a checkpoint and the model call), over
  ``--prompts N`` prompts (default 50) in one session after two warm-ups; also the whole prompt
  round trip (until the ``session/prompt`` response), and first chunk ÷ round trip.
- **replay**: ``session/load`` of a stored 10,017-event session (the shared synthetic workload of
  :mod:`bench.workload`: 371 turns of 27 events, 20 text deltas each), timed from sending the
  request to its response, which arrives after every replayed update. Reported as events/s and
  updates/s, and ÷ the same session's bare ``JsonlStore.load`` in this process (what a load costs
  before anything is sent). The same load is also timed with a raw reader that only splits the
  lines (no acp client, no pydantic): the agent's own replay rate, without the client's cost.

``--json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from acp import schema
from acp.stdio import spawn_agent_process

from bench._util import machine, median, percentile, scratch_dir
from bench.workload import build_session
from dsh.persistence.jsonl import JsonlStore

CONFIG = """\
- {id: llm, name: echo-llm, config: {delayMs: 0, answer: userText}}
- {id: clock, name: time-context}
- {id: app, name: stdio-app, config: {model: mock-echo, persistenceRoot: ./sessions}}
"""
REPLAY_TURNS = 371  # 27 events per turn: 10,017 events
SESSION_ID = "main-session-bench-acp"


class _Client:
    def __init__(self) -> None:
        self.first: float | None = None
        self.updates = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates += 1
        if self.first is None and getattr(update, "session_update", None) == "agent_message_chunk":
            self.first = time.perf_counter()

    async def request_permission(self, *args: Any, **kwargs: Any) -> schema.RequestPermissionResponse:
        return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEEPSEEK_", "DSH_"))}
    env["TZ"] = "UTC"
    return env


async def first_chunk(folder: Path, prompts: int) -> dict[str, Any]:
    (folder / "acp.yaml").write_text(CONFIG)
    client = _Client()
    with (folder / "stderr.log").open("wb") as err:
        async with spawn_agent_process(
            client, sys.executable, "-m", "dsh", "acp", "--config", "acp.yaml",
            cwd=folder, env=_env(), transport_kwargs={"stderr": err.fileno()},
        ) as (conn, _proc):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(folder), mcp_servers=[])).session_id
            firsts, totals = [], []
            for n in range(prompts + 2):
                client.first = None
                start = time.perf_counter()
                await conn.prompt(session_id=sid, prompt=[schema.TextContentBlock(type="text", text=f"hello {n}")])
                end = time.perf_counter()
                assert client.first is not None
                if n >= 2:
                    firsts.append((client.first - start) * 1000)
                    totals.append((end - start) * 1000)
    return {
        "prompts": prompts,
        "first_chunk_median_ms": round(median(firsts), 2),
        "first_chunk_p95_ms": round(percentile(firsts, 0.95), 2),
        "round_trip_median_ms": round(median(totals), 2),
        "first_chunk_share_of_round_trip": round(median(firsts) / median(totals), 3),
    }


async def replay(folder: Path, rounds: int) -> dict[str, Any]:
    root = folder / "sessions"
    session = build_session(SESSION_ID, REPLAY_TURNS)
    store = JsonlStore(str(root))
    await store.create(dict(session.header, cwd=str(folder)))
    await store.append(SESSION_ID, list(session.events))
    await store.release(SESSION_ID)
    events = len(session.events)
    bare = []
    for _ in range(rounds):
        start = time.perf_counter()
        await store.load(SESSION_ID)
        bare.append(time.perf_counter() - start)
        await store.release(SESSION_ID)
    loads, updates = [], 0
    for _ in range(rounds):
        client = _Client()
        with (folder / "stderr.log").open("ab") as err:
            async with spawn_agent_process(
                client, sys.executable, "-m", "dsh", "acp", "--root", str(root),
                cwd=folder, env=_env(), transport_kwargs={"stderr": err.fileno(), "limit": 50 * 1024 * 1024},
            ) as (conn, _proc):
                await conn.initialize(protocol_version=1)
                start = time.perf_counter()
                await conn.load_session(cwd=str(folder), session_id=SESSION_ID, mcp_servers=[])
                loads.append(time.perf_counter() - start)
                updates = client.updates
    raw = []
    for _ in range(rounds):
        raw.append(await _raw_load(folder, root))
    seconds = median(loads)
    return {
        "events": events,
        "updates": updates,
        "load_median_ms": round(seconds * 1000, 1),
        "events_per_s": round(events / seconds),
        "updates_per_s": round(updates / seconds),
        "raw_reader_load_median_ms": round(median(raw) * 1000, 1),
        "raw_reader_events_per_s": round(events / median(raw)),
        "store_load_median_ms": round(median(bare) * 1000, 1),
        "load_over_store_load": round(seconds / median(bare), 2),
    }


async def _raw_load(folder: Path, root: Path) -> float:
    """``session/load`` read as bare lines: the seconds until its response line arrives."""
    with (folder / "stderr.log").open("ab") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dsh", "acp", "--root", str(root), cwd=folder, env=_env(),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err, limit=50 * 1024 * 1024,
        )
    assert proc.stdin is not None and proc.stdout is not None
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
    proc.stdin.write(json.dumps(init).encode() + b"\n")
    await proc.stdout.readline()
    load = {"jsonrpc": "2.0", "id": 2, "method": "session/load",
            "params": {"sessionId": SESSION_ID, "cwd": str(folder), "mcpServers": []}}
    start = time.perf_counter()
    proc.stdin.write(json.dumps(load).encode() + b"\n")
    while b'"id":2' not in await proc.stdout.readline():
        pass
    seconds = time.perf_counter() - start
    proc.stdin.close()
    await proc.wait()
    return seconds


async def run(prompts: int, rounds: int) -> dict[str, Any]:
    with scratch_dir("dsh-bench-acp-") as tmp:
        one, two = Path(tmp) / "first", Path(tmp) / "replay"
        one.mkdir()
        two.mkdir()
        return {"machine": machine(), "first_chunk": await first_chunk(one, prompts), "replay": await replay(two, rounds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(run(args.prompts, args.rounds))
    if args.json:
        print(json.dumps(result))
        return
    f, r = result["first_chunk"], result["replay"]
    print(f"first agent_message_chunk: median {f['first_chunk_median_ms']} ms, p95 {f['first_chunk_p95_ms']} ms "
          f"(round trip {f['round_trip_median_ms']} ms; share {f['first_chunk_share_of_round_trip']})")
    print(f"session/load replay: {r['events']} events, {r['updates']} updates in {r['load_median_ms']} ms: "
          f"{r['events_per_s']} events/s, {r['updates_per_s']} updates/s; "
          f"÷ bare store load ({r['store_load_median_ms']} ms) = {r['load_over_store_load']}; "
          f"raw reader {r['raw_reader_load_median_ms']} ms ({r['raw_reader_events_per_s']} events/s)")


if __name__ == "__main__":
    main()
