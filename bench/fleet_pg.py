"""A fleet of worker processes on one PostgreSQL database; one is SIGKILLed, another resumes.

The issue: "4 worker processes, 40 agents with the echo model and time-context, 10 turns each,
all on one database; then one worker is killed with SIGKILL mid-turn and another resumes its
sessions. Every log is valid, contiguous and repaired; no event of a completed turn is lost."

Processes (each a fresh interpreter, ``python -m bench.fleet_pg <role> ...``):

``worker --schema S --agents ID... --turns N``
    Mounts the agent spine (``dsh.testing.mount_agent_loop``), ``postgres-sessions``
    (``{"dsn", "schema", "poolSize": 2}``), ``echo-llm`` (``{"delayMs": 1}``), ``echo-tool`` and
    ``time-context``, creates one agent per id on session ``fleet-<id>``, waits for ``go`` on
    stdin, then sends each agent N prompts in sequence (agents run concurrently; odd turns ask
    for the echo tool, so they take two steps). With ``--checkpoint`` (on by default) a pre-step
    listener also flushes the session before every step, so a crash leaves the open turn's
    first events in the database for ``load`` to repair. Every ``ctx.sessions.flush`` is timed.
    Output: JSON lines on stdout: ``ready``, one ``turn`` line per completed turn (written after
    its turn-end flush returned: agent, session, turn, reason, event count, durable count,
    sha256 of the first ``count`` event lines, turn-end flush ms), then ``done`` with the stats.
``resume --schema S --agents ID... --turns N``
    The same plugins; for each agent, a read-only ``store.read`` of its session (what the crash
    left), then ``ctx.agent_loop.resume`` (which loads and repairs; retried while the dead
    worker's lock lingers), then N more turns. Same output, plus ``resumed`` lines.

The orchestrator (:func:`run_fleet`, ``python -m bench.fleet_pg [--workers 4 --agents 10
--turns 10]``) starts the workers, sends ``go``, SIGKILLs one of them once half of its turns are
reported, waits for the others, resumes the victim's sessions in a new process (one more turn
each), then verifies every session from the database (:func:`verify_logs`): the store's
read-only check passes (contiguous seqs, surface rules), every ``turn/start`` is closed by its
``turn/end``, the log ends closed, every reported completed turn's events are present byte for
byte (sha256 of the lines), survivors hold exactly their turns, and each victim's session
holds its reported turns, at most one ``interrupted`` turn and the resumed turn. The figures
(turns/s, p50/p99 flush latency) are printed as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._util import PG_DSN, median, percentile
from bench.pg_append import postgres_unreachable
from dsh.persistence import postgres
from dsh.persistence.base import SessionLocked
from dsh.persistence.postgres import PostgresStore
from dsh.plugins import time_context
from dsh.runtime import Context
from dsh.session import Event, encode_event
from dsh.testing import mount_agent_loop

REPO = Path(__file__).resolve().parent.parent
MODEL = "mock-echo"
LOCK_RETRY_S = 20.0


def session_id_of(agent_id: str) -> str:
    return f"fleet-{agent_id}"


def prompt(agent_id: str, turn: int) -> str:
    """Odd turns ask for the echo tool (two steps); even turns are plain (one step)."""
    if turn % 2:
        return f"echo fleet {agent_id} turn {turn}"
    return f"hello from {agent_id}, turn {turn}"


def _emit(kind: str, **fields: Any) -> None:
    print(json.dumps({"kind": kind, **fields}), flush=True)


def _stats(samples: Sequence[float]) -> dict[str, Any]:
    if not samples:
        return {"count": 0}
    return {
        "count": len(samples),
        "p50_ms": round(median(samples), 3),
        "p99_ms": round(percentile(samples, 0.99), 3),
        "max_ms": round(max(samples), 3),
    }


# -- the worker --------------------------------------------------------------------------------


class _Digest:
    """A running sha256 of a session's event lines (``encode_event(e) + b"\\n"``)."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.count = 0

    def advance(self, events: Sequence[Event]) -> str:
        for event in events[self.count :]:
            self.hash.update(encode_event(event) + b"\n")
        self.count = len(events)
        return self.hash.hexdigest()


@dataclass
class _Worker:
    ctx: Context
    store: PostgresStore
    flush_ms: dict[str, list[float]] = field(
        default_factory=lambda: {"turn_end": [], "checkpoint": []}
    )
    last_turn_end_ms: dict[str, float] = field(default_factory=dict)


async def _mount(dsn: str, schema: str, delay_ms: float, checkpoint: bool) -> _Worker:
    from dsh.llm import echo
    from dsh.tools import echo as echo_tool

    ctx = Context()
    await mount_agent_loop(ctx)
    await ctx.plugin(postgres, {"dsn": dsn, "schema": schema, "poolSize": 2})
    await ctx.plugin(echo, {"delayMs": delay_ms})
    await ctx.plugin(echo_tool)
    await ctx.plugin(time_context, {"timeZone": "UTC"})
    worker = _Worker(ctx, ctx.session_store)
    service = ctx.sessions
    flush = service.flush

    async def timed_flush(session: Any) -> None:
        start = time.perf_counter()
        await flush(session)
        elapsed = (time.perf_counter() - start) * 1000
        if session.open_turn is None:
            worker.flush_ms["turn_end"].append(elapsed)
            worker.last_turn_end_ms[session.id] = elapsed
        else:
            worker.flush_ms["checkpoint"].append(elapsed)

    service.flush = timed_flush  # the loop looks ``flush`` up on the service at each turn end
    if checkpoint:

        async def checkpoint_before_step(agent: Any, *_: Any) -> None:
            await service.flush(agent.session)

        # After time-context's (prepended) listener, so the step's reading is flushed too.
        ctx.on("agent/pre-step", checkpoint_before_step)
    return worker


async def _drive(worker: _Worker, agent: Any, turns: int) -> int:
    """Send ``turns`` prompts in sequence; report each turn once its turn-end flush returned."""
    session = agent.session
    digest = _Digest()
    digest.advance(session.events)
    done = 0
    for _ in range(turns):
        turn = session.last_turn + 1
        agent.send([{"type": "text", "text": prompt(agent.id, turn)}])
        await agent.when_idle()
        events = session.events
        end = events[-1]
        reason = end.data["reason"]["kind"] if end.type == "turn/end" else None
        _emit(
            "turn",
            agent=agent.id,
            session=session.id,
            turn=turn,
            reason=reason,
            count=len(events),
            durable=worker.store.stored_count(session.id),
            sha256=digest.advance(events),
            flush_ms=round(worker.last_turn_end_ms.get(session.id, -1.0), 3),
        )
        done += 1
    return done


async def _wait_for_go() -> None:
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if line.strip() != "go":
        raise SystemExit(f"expected 'go' on stdin, got {line!r}")


async def worker_main(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    worker = await _mount(args.dsn, args.schema, args.delay_ms, args.checkpoint)
    ctx = worker.ctx
    agents = [
        ctx.agent_loop.create(
            agent_id, model=MODEL, cwd="/fleet", session_id=session_id_of(agent_id)
        )
        for agent_id in args.agents
    ]
    _emit("ready", pid=os.getpid(), setup_s=round(time.perf_counter() - started, 3))
    await _wait_for_go()
    began = time.perf_counter()
    counts = await asyncio.gather(*(_drive(worker, agent, args.turns) for agent in agents))
    wall = time.perf_counter() - began
    await ctx.dispose()
    _emit(
        "done",
        turns=sum(counts),
        seconds=round(wall, 3),
        turns_per_s=round(sum(counts) / wall, 2),
        flush_turn_end=_stats(worker.flush_ms["turn_end"]),
        flush_checkpoint=_stats(worker.flush_ms["checkpoint"]),
        flush_turn_end_ms=[round(v, 3) for v in worker.flush_ms["turn_end"]],
    )


async def _resume_one(worker: _Worker, agent_id: str) -> Any:
    session_id = session_id_of(agent_id)
    before = await worker.store.read(session_id)
    start = time.perf_counter()
    deadline = start + LOCK_RETRY_S
    while True:
        try:
            agent = await worker.ctx.agent_loop.resume(agent_id, session_id)
            break
        except SessionLocked:
            # The killed worker's lock lives until the server notices its connection is gone.
            if time.perf_counter() > deadline:
                raise
            await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - start
    last = before.events[-1] if before.events else None
    _emit(
        "resumed",
        agent=agent_id,
        session=session_id,
        stored_events=len(before.events),
        open_turn_in_db=last is not None and last.type != "turn/end",
        loaded_events=len(agent.session),
        repaired=len(agent.session) - len(before.events),
        resume_ms=round(elapsed * 1000, 3),
    )
    return agent


async def resume_main(args: argparse.Namespace) -> None:
    worker = await _mount(args.dsn, args.schema, args.delay_ms, args.checkpoint)
    agents = [await _resume_one(worker, agent_id) for agent_id in args.agents]
    began = time.perf_counter()
    counts = await asyncio.gather(*(_drive(worker, agent, args.turns) for agent in agents))
    wall = time.perf_counter() - began
    await worker.ctx.dispose()
    _emit("done", turns=sum(counts), seconds=round(wall, 3))


# -- the orchestrator --------------------------------------------------------------------------


@dataclass
class _Proc:
    name: str
    agents: list[str]
    process: asyncio.subprocess.Process
    lines: list[dict[str, Any]] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    turn_reported: asyncio.Event = field(default_factory=asyncio.Event)
    readers: list[asyncio.Task[None]] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("kind") == kind]

    async def read_stdout(self) -> None:
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            text = raw.decode(errors="replace").strip()
            if not text:
                continue
            try:
                line = json.loads(text)
            except ValueError:
                self.stderr.append(f"(stdout) {text}")
                continue
            self.lines.append(line)
            if line.get("kind") == "ready":
                self.ready.set()
            elif line.get("kind") == "turn":
                self.turn_reported.set()

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            self.stderr.append(raw.decode(errors="replace").rstrip())

    async def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        await self.process.stdin.drain()

    async def finish(self, timeout: float) -> int:
        try:
            code = await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            self.process.kill()
            code = await self.process.wait()
        await asyncio.gather(*self.readers, return_exceptions=True)
        return code


async def _spawn(
    name: str,
    role: str,
    agents: list[str],
    turns: int,
    dsn: str,
    schema: str,
    *,
    delay_ms: float,
    checkpoint: bool,
) -> _Proc:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.fleet_pg",
        role,
        "--dsn",
        dsn,
        "--schema",
        schema,
        "--turns",
        str(turns),
        "--delay-ms",
        str(delay_ms),
        *([] if checkpoint else ["--no-checkpoint"]),
        "--agents",
        *agents,
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    proc = _Proc(name, agents, process)
    proc.readers = [
        asyncio.create_task(proc.read_stdout()),
        asyncio.create_task(proc.read_stderr()),
    ]
    return proc


def _lines_digest(lines: Sequence[bytes]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line + b"\n")
    return digest.hexdigest()


async def verify_logs(
    store: PostgresStore,
    expected_turns: dict[str, int],
    reported: dict[str, list[dict[str, Any]]],
    victims: set[str],
) -> tuple[list[str], dict[str, Any]]:
    """Check every session in the database; returns (problems, facts)."""
    problems: list[str] = []
    interrupted = 0
    total_events = 0
    for session_id, turns in sorted(expected_turns.items()):
        try:
            stored = await store.read(session_id)  # scan + surface validation, no repair
            exported = await store.export(session_id)
        except Exception as exc:
            problems.append(f"{session_id}: read failed: {exc}")
            continue
        events = stored.events
        total_events += len(events)
        lines = exported.split(b"\n")[1:-1]
        if [e.seq for e in events] != list(range(len(events))):
            problems.append(f"{session_id}: seqs are not contiguous")
        open_turn: int | None = None
        ends: list[tuple[int, str]] = []
        for event in events:
            if event.type == "turn/start":
                if open_turn is not None:
                    problems.append(f"{session_id}: turn {open_turn} never closed")
                open_turn = event.data["turn"]
            elif event.type == "turn/end":
                if event.data["turn"] != open_turn:
                    problems.append(
                        f"{session_id}: turn/end {event.data['turn']} without its start"
                    )
                ends.append((event.data["turn"], event.data["reason"]["kind"]))
                open_turn = None
        if open_turn is not None or not events or events[-1].type != "turn/end":
            problems.append(f"{session_id}: the log does not end with a closed turn")
        kinds = [kind for _, kind in ends]
        interrupted += kinds.count("interrupted")
        for report in reported.get(session_id, []):
            count = report["count"]
            if report["reason"] != "completed" or report["durable"] != count:
                problems.append(f"{session_id}: turn {report['turn']} reported {report}")
            elif len(lines) < count or _lines_digest(lines[:count]) != report["sha256"]:
                problems.append(f"{session_id}: completed turn {report['turn']} lost or altered")
        if [number for number, _ in ends] != list(range(1, len(ends) + 1)):
            problems.append(f"{session_id}: turns are not numbered 1..{len(ends)}")
        if session_id in victims:
            # Completed turns, then the turn the kill interrupted if its first events were
            # flushed, then the resumed turn. (The digests above prove the reported ones.)
            body = kinds[:-2] if kinds[-2:-1] == ["interrupted"] else kinds[:-1]
            if kinds[-1:] != ["completed"] or body != ["completed"] * len(body):
                problems.append(f"{session_id}: unexpected turn ends after resume: {kinds}")
        elif kinds != ["completed"] * turns:
            problems.append(f"{session_id}: expected {turns} completed turns, got {kinds}")
    return problems, {
        "sessions": len(expected_turns),
        "events": total_events,
        "interrupted_turns": interrupted,
    }


@dataclass(frozen=True)
class _Plan:
    dsn: str
    schema: str
    delay_ms: float
    checkpoint: bool
    timeout: float

    async def spawn(self, name: str, role: str, agents: list[str], turns: int) -> _Proc:
        return await _spawn(
            name,
            role,
            agents,
            turns,
            self.dsn,
            self.schema,
            delay_ms=self.delay_ms,
            checkpoint=self.checkpoint,
        )


def _failure(proc: _Proc, what: str) -> RuntimeError:
    return RuntimeError(f"{proc.name} {what}:\n" + "\n".join(proc.stderr[-30:]))


async def _wait_ready(proc: _Proc, timeout: float) -> None:
    ready = asyncio.create_task(proc.ready.wait())
    exited = asyncio.create_task(proc.process.wait())
    await asyncio.wait({ready, exited}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    ready.cancel()
    exited.cancel()
    if not proc.ready.is_set():
        await proc.finish(5)
        raise _failure(proc, "did not start")


async def _kill_halfway(victim: _Proc, turns: int, deadline: float) -> None:
    """SIGKILL ``victim`` as soon as half of its agents' turns are reported."""
    kill_after = max(1, len(victim.agents) * turns // 2)
    while True:
        victim.turn_reported.clear()
        if len(victim.of_kind("turn")) >= kill_after:
            break
        if victim.process.returncode is not None or time.perf_counter() > deadline:
            raise _failure(victim, "ended before the kill")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(victim.turn_reported.wait(), 1)
    victim.process.send_signal(signal.SIGKILL)


def _fleet_figures(procs: list[_Proc], victim: _Proc, code: int) -> dict[str, Any]:
    """Turns/s and flush latencies of the run phase (the victim's turns included)."""
    survivors = [proc for proc in procs if proc is not victim]
    done = [proc.of_kind("done")[0] for proc in survivors]
    wall = max(line["seconds"] for line in done)
    turns = [line for proc in procs for line in proc.of_kind("turn")]
    return {
        "turns_completed": len(turns),
        "wall_s": round(wall, 3),
        "turns_per_s": round(len(turns) / wall, 2),
        "per_worker_turns_per_s": [line["turns_per_s"] for line in done],
        "flush_turn_end": _stats([line["flush_ms"] for line in turns]),
        "flush_checkpoint_p50_ms_per_worker": [
            line["flush_checkpoint"].get("p50_ms") for line in done
        ],
        "victim_exit_code": code,
    }


async def run_fleet(
    *,
    workers: int = 4,
    agents_per_worker: int = 10,
    turns: int = 10,
    dsn: str = PG_DSN,
    schema: str | None = None,
    delay_ms: float = 1,
    checkpoint: bool = True,
    keep_schema: bool = False,
    timeout: float = 300,
) -> dict[str, Any]:
    """Run the fleet scenario; returns figures, facts and ``problems`` (empty when all holds).

    Worker ``w`` drives agents ``w<w>a0..`` on sessions ``fleet-w<w>a<a>``; worker 1 (worker 0
    when alone) is the one killed.
    """
    plan = _Plan(dsn, schema or f"dsh_fleet_{uuid.uuid4().hex[:10]}", delay_ms, checkpoint, timeout)
    report: dict[str, Any] = {
        "schema": plan.schema,
        "workers": workers,
        "agents": workers * agents_per_worker,
        "turns": turns,
    }
    procs: list[_Proc] = []
    try:
        # 1. Start the workers; let them go together once all are ready.
        for w in range(workers):
            agents = [f"w{w}a{a}" for a in range(agents_per_worker)]
            procs.append(await plan.spawn(f"worker-{w}", "worker", agents, turns))
        for proc in procs:
            await _wait_ready(proc, timeout)
        began = time.perf_counter()
        for proc in procs:
            await proc.go()

        # 2. Kill one mid-run; the others finish.
        victim = procs[1 if workers > 1 else 0]
        await _kill_halfway(victim, turns, began + timeout)
        reported_by_victim = {agent: 0 for agent in victim.agents}
        for line in victim.of_kind("turn"):
            reported_by_victim[line["agent"]] += 1
        report["kill"] = {
            "worker": victim.name,
            "after_s": round(time.perf_counter() - began, 3),
            "turns_reported_by_victim": sum(reported_by_victim.values()),
            "agents_mid_run": sum(1 for n in reported_by_victim.values() if n < turns),
        }
        codes = {proc.name: await proc.finish(timeout) for proc in procs}
        for proc in procs:
            if proc is not victim and (codes[proc.name] != 0 or not proc.of_kind("done")):
                raise _failure(proc, f"failed ({codes[proc.name]})")
        report["fleet"] = _fleet_figures(procs, victim, codes[victim.name])

        # 3. Resume the victim's sessions in a new process, one more turn each.
        resumer = await plan.spawn("resumer", "resume", victim.agents, 1)
        procs.append(resumer)
        code = await resumer.finish(timeout)
        if code != 0 or not resumer.of_kind("done"):
            raise _failure(resumer, f"failed ({code})")
        resumed = resumer.of_kind("resumed")
        report["resume"] = {
            "sessions": len(resumed),
            "open_turns_in_db": sum(1 for r in resumed if r["open_turn_in_db"]),
            "closer_events_appended": sum(r["repaired"] for r in resumed),
            "resume_ms_p50": round(median([r["resume_ms"] for r in resumed]), 3),
            "resume_ms_max": round(max(r["resume_ms"] for r in resumed), 3),
        }

        # 4. Verify every log from the database.
        reported: dict[str, list[dict[str, Any]]] = {}
        for proc in procs:
            for line in proc.of_kind("turn"):
                reported.setdefault(line["session"], []).append(line)
        expected = {session_id_of(a): turns for proc in procs[:workers] for a in proc.agents}
        victims = {session_id_of(a) for a in victim.agents}
        store = PostgresStore(dsn, schema=plan.schema, pool_size=2)
        try:
            problems, facts = await verify_logs(store, expected, reported, victims)
        finally:
            await store.close()
        if facts["interrupted_turns"] != report["resume"]["open_turns_in_db"]:
            problems.append(
                f"{facts['interrupted_turns']} interrupted turns in the logs, but "
                f"{report['resume']['open_turns_in_db']} open turns were left by the kill"
            )
        report["verify"] = facts
        report["problems"] = problems
        return report
    finally:
        for proc in procs:
            if proc.process.returncode is None:
                proc.process.kill()
                await proc.process.wait()
        if not keep_schema:
            await drop_schema(dsn, plan.schema)


async def drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# -- command line ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fleet_pg", description=__doc__.splitlines()[0]
    )
    parser.add_argument("role", nargs="?", choices=["run", "worker", "resume"], default="run")
    parser.add_argument("--dsn", default=PG_DSN)
    parser.add_argument("--schema")
    parser.add_argument("--agents", nargs="*", default=[], help="agent ids (worker/resume)")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--delay-ms", type=float, default=1)
    parser.add_argument("--no-checkpoint", dest="checkpoint", action="store_false")
    parser.add_argument("--workers", type=int, default=4, help="run: worker processes")
    parser.add_argument("--agents-per-worker", type=int, default=10, help="run: agents per worker")
    args = parser.parse_args(argv)
    if args.role == "worker":
        asyncio.run(worker_main(args))
        return 0
    if args.role == "resume":
        asyncio.run(resume_main(args))
        return 0
    reason = postgres_unreachable(args.dsn)
    if reason is not None:
        print(json.dumps({"skipped": reason}))
        return 0
    os.environ.pop("DSH_DEV_CHECKS", None)  # a benchmark: the development check stays off
    report = asyncio.run(
        run_fleet(
            workers=args.workers,
            agents_per_worker=args.agents_per_worker,
            turns=args.turns,
            dsn=args.dsn,
            schema=args.schema,
            delay_ms=args.delay_ms,
            checkpoint=args.checkpoint,
        )
    )
    print(json.dumps(report, indent=2))
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
