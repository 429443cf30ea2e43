"""Shared machinery of the reliability suite and of ``bench/soak.py``.

- :data:`SLOW_MODEL` is the source of a plugin file (written next to a YAML composition in a
  temporary folder) that registers a scripted, slowly streaming model ``slow`` on ``ctx.llm``.
  It alternates plain replies with calls to the built-in ``echo`` tool and, so that a crash can
  land *inside* a turn that is already partly on disk, checkpoints the session (awaits
  ``session/flush``) before every streamed delta and before every step.
- :func:`crash_trial` runs ``dsh chat`` on that composition in a subprocess, feeds it lines as
  turns finish, SIGKILLs it at a seeded random moment, resumes the session (through the CLI or
  the store API) and checks the crash-consistency contract; it returns a :class:`Trial` whose
  ``failures`` list is empty when everything held.
- :func:`expected_closers` is an independent implementation of the reference's crash repair
  (docs/surface-and-derivation.md), used as the oracle.
- :func:`build_base_log` makes a realistic, deterministic session log in-process (three turns,
  two of them calling tools) for the corruption tests; :func:`corrupt` applies one corruption and
  :func:`check_corrupt_load` is the corruption oracle.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.wait import wait_until_sync as wait_for  # also what the reliability tests use

REPO = Path(__file__).resolve().parents[2]
INTERRUPTED_TEXT = "Tool call interrupted by a crash; no result was recorded."
KEY_ORDER = ("type", "seq", "time", "data", "sourceEventSeqs", "surfaceOp")


def dsh_env(**extra: str) -> dict[str, str]:
    """The environment ``dsh`` runs with in these tests (no keys, no user config, fixed zone)."""
    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("DEEPSEEK_", "DSH_", "OPENAI_")) or k == "DSH_HOME"
    }
    env.update({"TZ": "Asia/Shanghai", "PYTHONUNBUFFERED": "1", "DSH_DEV_CHECKS": "1"})
    env.pop("NO_COLOR", None)
    src = str(REPO / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def run_dsh(
    args: list[str], cwd: Path, *, stdin: str = "", timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsh", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dsh_env(**env),
        timeout=timeout,
    )


class Chat:
    """A running ``dsh chat`` with stdin on a pipe and stdout/stderr in files (never blocks)."""

    _count = 0

    def __init__(self, args: list[str], cwd: Path, **env: str) -> None:
        Chat._count += 1
        tag = f"{os.getpid()}-{Chat._count}-{time.monotonic_ns()}"
        self.out_path = Path(tempfile.gettempdir()) / f"dsh-chat-{tag}.out"
        self.err_path = self.out_path.with_suffix(".err")
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dsh", "chat", *args, "--plain"],
                cwd=cwd,
                env=dsh_env(**env),
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
            )

    @property
    def out(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def err(self) -> str:
        return self.err_path.read_text(errors="replace")

    def prompts(self) -> int:
        return self.out.count("\n> ")

    def wait_for(self, needle: str, count: int = 1, timeout: float = 60) -> None:
        def seen() -> bool:
            if self.out.count(needle) >= count:
                return True
            if self.proc.poll() is not None:
                raise AssertionError(f"dsh exited {self.proc.returncode} before {needle!r}: {self.err[-500:]}")
            return False

        wait_for(seen, timeout, f"{needle!r} x{count} in {self.out[-300:]!r}")

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def close(self, timeout: float = 60) -> tuple[int, str, str]:
        assert self.proc.stdin is not None
        with suppress(BrokenPipeError):
            self.proc.stdin.close()
        rc = self.proc.wait(timeout=timeout)
        return rc, self.out, self.err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdin is not None:
            with suppress(BrokenPipeError):
                self.proc.stdin.close()

    def cleanup(self) -> None:
        self.kill()
        for path in (self.out_path, self.err_path):
            path.unlink(missing_ok=True)


# -- the scripted slow model -------------------------------------------------------------------

SLOW_MODEL = '''\
"""slow-model: a scripted model ``slow`` for the crash trials of tests/reliability.

Replies depend only on the request (so a resumed session gets the same behaviour): after a tool
result, a closing text; on the n-th user line, a text reply when n is even, otherwise a text
preamble followed by one (n % 4 == 1) or two (n % 4 == 3) calls to the ``echo`` tool. Text is
streamed three characters per delta with ``delayMs`` between deltas (25 times that when the
newest user line contains ``[slow]``). With ``checkpoint`` (the
default) the session is flushed before every delta and before every step, so a kill can find an
open turn (and an open step) on disk; each pre-step checkpoint is followed by a short pause.
"""

from __future__ import annotations

import asyncio
import json

name = "slow-model"
inject = ["llm"]


def _is_user_line(message):
    if message.get("role") != "user":
        return False
    texts = [b for b in message.get("content") or () if b.get("type") == "text"]
    return bool(texts) and not str(texts[0].get("text", "")).startswith("<")


def _after_tool(messages):
    """Whether a tool result came after the newest user line (context messages are skipped)."""
    for message in reversed(messages):
        if any(b.get("type") == "tool-result" for b in message.get("content") or ()):
            return True
        if _is_user_line(message):
            return False
    return False


class SlowAdapter:
    def __init__(self, ctx, delay, checkpoint):
        self.ctx = ctx
        self.delay = delay
        self.checkpoint = checkpoint

    async def _pause(self, session_id, slow):
        if self.checkpoint and session_id is not None:
            sessions = self.ctx.get("sessions")
            session = sessions.get(session_id) if sessions is not None else None
            if session is not None:
                await sessions.flush(session)
        await asyncio.sleep(self.delay * (25 if slow else 1))  # a slow stream (scripted)

    async def stream(self, request):
        messages = list(request.messages)
        after_tool = _after_tool(messages)
        users = [m for m in messages if _is_user_line(m)]
        n = len(users)
        slow = bool(users) and "[slow]" in str(users[-1]["content"][0].get("text", ""))
        calls = 0
        if after_tool:
            text = f"Echoed for line {n}: d\\u00e9j\\u00e0 vu \\\\ \\"quoted\\" \\U0001f600."
        elif n % 2 == 1:
            text = f"Line {n}: let me call echo \\u2026"
            calls = 1 if n % 4 == 1 else 2
        else:
            text = f"Line {n}: a plain reply, na\\u00efve \\u00abquotes\\u00bb and \\\\t tabs."
        yield {"type": "block-start", "index": 0, "blockType": "text"}
        for i in range(0, len(text), 3):
            await self._pause(request.session_id, slow)
            yield {"type": "text-delta", "index": 0, "text": text[i : i + 3]}
        yield {"type": "block-end", "index": 0, "block": {"type": "text", "text": text}}
        for c in range(calls):
            args = json.dumps({"text": f"line {n} call {c} \\u00fc"}, ensure_ascii=False, separators=(",", ":"))
            call_id = f"call-{n}-{c}"
            yield {"type": "block-start", "index": 1 + c, "blockType": "tool-call"}
            await self._pause(request.session_id, slow)
            yield {"type": "tool-call-delta", "index": 1 + c, "id": call_id, "name": "echo", "argumentsDelta": args}
            yield {
                "type": "block-end",
                "index": 1 + c,
                "block": {"type": "tool-call", "id": call_id, "name": "echo", "arguments": args},
            }
        yield {"type": "usage", "usage": {"inputTokens": 20, "outputTokens": len(text)}}
        yield {"type": "finish", "reason": {"kind": "tool-calls" if calls else "stop"}}


def apply(ctx, config):
    config = dict(config or {})
    checkpoint = bool(config.get("checkpoint", True))
    adapter = SlowAdapter(ctx, float(config.get("delayMs", 4)) / 1000, checkpoint)
    ctx.defer(ctx.llm.register_adapter(["slow"], adapter))
    if checkpoint:

        async def before_step(agent, *rest):
            await ctx.get("sessions").flush(agent.session)
            await asyncio.sleep(adapter.delay * 5)  # a slow pre-step: kills land between steps too

        ctx.on("agent/pre-step", before_step)
'''

WELCOME = "crash-trial ready."


def write_composition(
    folder: Path,
    *,
    store: str = "jsonl",
    delay_ms: float = 4,
    checkpoint: bool = True,
    name: str = "dsh.yml",
) -> Path:
    """Write ``slow_model.py`` and a YAML composition (slow model, echo tool, time-context,
    stdio-app on ``store``) into ``folder``; returns the YAML path."""
    (folder / "slow_model.py").write_text(SLOW_MODEL, encoding="utf-8")
    config = folder / name
    config.write_text(
        "- id: model\n"
        "  name: ./slow_model.py\n"
        f"  config: {{delayMs: {delay_ms}, checkpoint: {'true' if checkpoint else 'false'}}}\n"
        "- id: echo-tool\n"
        "  name: echo-tool\n"
        "- id: time-context\n"
        "  name: time-context\n"
        "- id: app\n"
        "  name: stdio-app\n"
        "  config:\n"
        "    model: slow\n"
        f"    store: {store}\n"
        f"    welcome: {WELCOME}\n"
        # A project-local store next to the config (relative paths resolve against its folder).
        "    persistenceRoot: ./.sessions\n",
        encoding="utf-8",
    )
    return config


# -- reading what is on disk -------------------------------------------------------------------


@dataclass
class Snapshot:
    """One session as stored: its header line, complete event lines, and a torn tail (JSONL)."""

    session_id: str | None = None
    header: bytes | None = None
    lines: list[bytes] = field(default_factory=list)
    torn: bytes = b""
    temps: list[str] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        return self.header is not None


def bucket_of(root: Path, cwd: Path) -> Path:
    return root / f"cwd-{hashlib.sha256(str(cwd).encode()).hexdigest()[:12]}"


def sqlite_path(workdir: Path) -> Path:
    return workdir / ".sessions" / "sessions.sqlite3"


def snapshot(workdir: Path, store: str) -> Snapshot:
    """The (single) session a ``dsh chat`` run in ``workdir`` stored, read raw."""
    root = workdir / ".sessions"
    if store == "jsonl":
        logs = sorted(root.glob("cwd-*/*.jsonl"))
        temps = sorted(p.name for p in root.glob("cwd-*/*.tmp"))
        if not logs:
            return Snapshot(temps=temps)
        assert len(logs) == 1, logs
        raw = logs[0].read_bytes()
        parts = raw.split(b"\n")
        header, lines, torn = parts[0], parts[1:-1], parts[-1]
        if len(parts) == 1:  # a header-less fragment (never written by dsh)
            return Snapshot(logs[0].stem, None, [], raw, temps)
        session_id = json.loads(header)["id"]
        return Snapshot(session_id, header, lines, torn, temps)
    path = sqlite_path(workdir)
    if not path.exists():
        return Snapshot()
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        db.text_factory = bytes
        db.execute("BEGIN")
        try:
            rows = db.execute("SELECT id, header FROM sessions").fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):  # created, schema not written yet
                return Snapshot()
            raise
        if not rows:
            return Snapshot()
        assert len(rows) == 1, rows
        session_id, header = rows[0][0].decode(), rows[0][1]
        events = db.execute(
            "SELECT seq, line FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
        db.execute("COMMIT")
    finally:
        db.close()
    for index, (seq, _line) in enumerate(events):
        assert seq == index, f"row keyed {seq} at index {index}"
    return Snapshot(session_id, header, [line for _, line in events])


def _decode(line: bytes) -> dict[str, Any]:
    value = json.loads(line)
    assert isinstance(value, dict)
    return value


_decode_cached = functools.lru_cache(maxsize=8192)(_decode)


def decode(line: bytes) -> dict[str, Any]:
    """One JSON line as a dict (short lines cached: the oracles only read what it returns)."""
    return _decode_cached(line) if len(line) < 65536 else _decode(line)


def committed_count(lines: list[bytes]) -> int:
    """How many lines the last ``turn/end`` commits (0 when there is none)."""
    for index in range(len(lines) - 1, -1, -1):
        try:
            if decode(lines[index]).get("type") == "turn/end":
                return index + 1
        except ValueError:
            continue
    return 0


# -- the crash-repair oracle (docs/surface-and-derivation.md, written independently of dsh.session.repair) ------


def expected_closers(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    open_turn: Any = None
    open_step: Any = None
    pending: dict[str, dict[str, Any]] = {}
    for event in events:
        kind, data = event["type"], event["data"]
        if kind in ("turn/start", "turn/end", "step/end"):
            pending = {}
            if kind == "turn/start":
                open_turn, open_step = data["turn"], None
            elif kind == "turn/end":
                open_turn, open_step = None, None
            else:
                open_step = None
        elif kind == "step/start":
            open_step = data["step"]
        elif kind == "assistant/message":
            for block in data.get("content", []):
                if block.get("type") == "tool-call":
                    pending[block["id"]] = {"step": data["step"], "seq": None}
        elif kind == "tool/call" and data["callId"] in pending:
            pending[data["callId"]]["seq"] = event["seq"]
        elif kind == "tool/result":
            pending.pop(data["callId"], None)
    if open_turn is None or not events:
        return []
    at, seq = events[-1]["time"], events[-1]["seq"] + 1
    out: list[dict[str, Any]] = []
    for call_id, call in pending.items():
        closer: dict[str, Any] = {
            "type": "tool/result",
            "seq": seq,
            "time": at,
            "data": {
                "turn": open_turn,
                "step": call["step"],
                "callId": call_id,
                "content": [{"type": "text", "text": INTERRUPTED_TEXT}],
                "isError": True,
                "error": {"name": "InterruptedError", "code": "interrupted"},
            },
            "surfaceOp": "append",
        }
        if call["seq"] is not None:
            closer["sourceEventSeqs"] = [call["seq"]]
        out.append(closer)
        seq += 1
    if open_step is not None:
        out.append({"type": "step/end", "seq": seq, "time": at, "data": {"turn": open_turn, "step": open_step}})
        seq += 1
    out.append(
        {"type": "turn/end", "seq": seq, "time": at, "data": {"turn": open_turn, "reason": {"kind": "interrupted"}}}
    )
    return out


def crash_state(before: Snapshot) -> str:
    """A label for what a kill left on disk (for the trial statistics)."""
    if not before.exists:
        return "nothing persisted"
    closers = expected_closers([decode(line) for line in before.lines])
    label = "idle (turns closed)"
    if closers:
        kinds = [c["type"] for c in closers]
        if "tool/result" in kinds:
            label = "open turn, pending tool call"
        elif "step/end" in kinds:
            label = "open turn, open step"
        else:
            label = "open turn, between steps"
    if before.torn:
        label += ", torn tail"
    return label


def check_resumed(before: Snapshot, after: Snapshot, *, resumed_by: str | None) -> list[str]:
    """The crash-consistency contract between a kill-time snapshot and the resumed log."""
    problems: list[str] = []
    if after.header != before.header:
        problems.append("header line changed")
    committed = committed_count(before.lines)
    if after.lines[:committed] != before.lines[:committed]:
        problems.append(f"committed prefix ({committed} events) is not byte-identical after resume")
    kept = len(before.lines)
    if after.lines[:kept] != before.lines[:kept]:
        problems.append("complete events of the interrupted turn were not preserved")
    closers = expected_closers([decode(line) for line in before.lines])
    got = [decode(line) for line in after.lines[kept : kept + len(closers)]]
    if got != closers:
        problems.append(f"crash closers differ: expected {closers}, got {got}")
    events = [decode(line) for line in after.lines]
    for index, event in enumerate(events):
        if event.get("seq") != index:
            problems.append(f"seq {event.get('seq')} at index {index}: not contiguous")
            break
        if list(event) != [k for k in KEY_ORDER if k in event] and not (
            event["type"] == "tool/result" and event["data"].get("error", {}).get("code") == "interrupted"
        ):
            problems.append(f"event {index} has keys out of order: {list(event)}")
            break
    rest = events[kept + len(closers) :]
    if resumed_by == "store":
        if [e["type"] for e in rest] != ["turn/start", "user/message", "turn/end"]:
            problems.append(f"the turn appended through the store is not what was written: {rest[:3]}")
    elif resumed_by == "cli":
        last_turn = max((e["data"]["turn"] for e in events[:kept] if e["type"] == "turn/start"), default=0)
        if not rest or rest[0]["type"] != "turn/start" or rest[0]["data"]["turn"] != last_turn + 1:
            problems.append(f"the resumed run did not start turn {last_turn + 1}: {rest[:1]}")
        elif rest[-1]["type"] != "turn/end" or rest[-1]["data"]["reason"] != {"kind": "completed"}:
            problems.append(f"the resumed turn did not complete: {rest[-1:]}")
        headers = [e["data"]["reason"] for e in rest if e["type"] == "request/header"]
        # docs/format-v0.md: "initial" when the log had no earlier header, otherwise "resume".
        earlier = any(e["type"] == "request/header" for e in events[:kept])
        if headers[:1] != ["resume" if earlier else "initial"]:
            problems.append(f"the resumed run logged request headers {headers} (earlier header: {earlier})")
    elif rest:
        problems.append(f"unexpected events after the closers: {rest[:2]}")
    if after.torn:
        problems.append(f"torn tail left after resume: {after.torn[:40]!r}")
    if after.temps:
        problems.append(f"stale temp files left after resume: {after.temps}")
    return problems


# -- one crash trial ---------------------------------------------------------------------------


@dataclass
class Trial:
    store: str
    seed: int
    resume: str
    kill_after: float = 0.0
    lines_sent: int = 0
    state: str = ""
    committed: int = 0
    kept: int = 0
    closers: int = 0
    failures: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return (
            f"{self.store} seed={self.seed} resume={self.resume} kill_after={self.kill_after:.3f}s "
            f"lines={self.lines_sent} state={self.state!r}: " + "; ".join(self.failures)
        )


def _threads_stopped(pid: int) -> bool:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return True
    for task in tasks:
        try:
            stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        except FileNotFoundError:
            continue
        state = stat.rsplit(")", 1)[1].split()[0]
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


def _resume_via_store(workdir: Path, store: str, session_id: str) -> list[str]:
    """Load through the store API (crash repair), then append one closed turn after it."""
    from dsh.session import Session

    async def go() -> list[str]:
        if store == "jsonl":
            from dsh.persistence.jsonl import JsonlStore

            backend: Any = JsonlStore(workdir / ".sessions")
        else:
            from dsh.persistence.sqlite import SqliteStore

            backend = SqliteStore(sqlite_path(workdir))
        problems = []
        try:
            loaded = await backend.load(session_id)
            session = Session.restore(session_id, list(loaded.events), header=loaded.header)
            start = len(session)
            turn = session.last_turn + 1
            user = {"kind": "user"}
            session.append("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": user}})
            session.append(
                "user/message", {"content": [{"type": "text", "text": "after"}], "source": user}, surface_op="append"
            )
            session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
            await backend.append(session_id, list(session.events)[start:])
        except Exception as exc:
            problems.append(f"store load/append after the crash failed: {type(exc).__name__}: {exc}")
        finally:
            await backend.close()
        return problems

    return asyncio.run(go())


def _verify_stable(workdir: Path, store: str, session_id: str) -> list[str]:
    """A second load of the resumed log finds nothing to repair."""

    async def go() -> list[str]:
        if store == "jsonl":
            from dsh.persistence.jsonl import JsonlStore

            backend: Any = JsonlStore(workdir / ".sessions")
        else:
            from dsh.persistence.sqlite import SqliteStore

            backend = SqliteStore(sqlite_path(workdir))
        try:
            loaded = await backend.load(session_id)
            if loaded.repaired or loaded.truncated_bytes:
                return [f"second load repaired again ({loaded.repaired} closers, {loaded.truncated_bytes} bytes)"]
            return []
        except Exception as exc:
            return [f"second load failed: {type(exc).__name__}: {exc}"]
        finally:
            await backend.close()

    return asyncio.run(go())


def crash_trial(base: Path, store: str, seed: int, *, resume: str | None = None) -> Trial:
    """Kill ``dsh chat`` at a seeded random moment, resume, and check the contract.

    ``resume`` is ``"cli"`` (``dsh chat --resume ID`` with one more line) or ``"store"`` (the
    store API); by default every fourth seed uses the CLI.
    """
    rng = random.Random(f"crash:{store}:{seed}")
    mode = resume or ("cli" if seed % 4 == 0 else "store")
    trial = Trial(store, seed, mode)
    workdir = base / f"{store}-{seed}"
    workdir.mkdir(parents=True)
    config = write_composition(workdir, store=store, delay_ms=rng.choice([2, 4, 6]))
    # One kill in eight lands during start-up; the rest while turns run or between them.
    early = rng.random() < 0.125
    trial.kill_after = rng.uniform(0.0, 0.5) if early else rng.uniform(0.0, 1.5)
    out_path, err_path = workdir / "stdout.txt", workdir / "stderr.txt"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dsh", "chat", "--config", str(config), "--plain"],
            cwd=workdir,
            env=dsh_env(),
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
        )
    assert proc.stdin is not None
    started = time.monotonic()
    ready_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            if early and now - started >= trial.kill_after:
                break
            if proc.poll() is not None:
                trial.failures.append(
                    f"dsh exited {proc.returncode} on its own: {err_path.read_text(errors='replace')[-500:]}"
                )
                return trial
            text = out_path.read_text(errors="replace")
            if ready_at is None and WELCOME in text:
                ready_at = now
            if ready_at is not None:
                if not early and now - ready_at >= trial.kill_after:
                    break
                prompts = text.count("\n> ")
                if prompts == trial.lines_sent + 1 and trial.lines_sent < 12:
                    trial.lines_sent += 1
                    proc.stdin.write(f"line {trial.lines_sent} \u00fc\n".encode())
                    proc.stdin.flush()
            if now - started > 60:
                trial.failures.append("dsh never became ready")
                return trial
            time.sleep(0.003)  # deliberate: polls output and clock, so the kill lands at kill_after
        os.kill(proc.pid, signal.SIGSTOP)
        wait_for(lambda: _threads_stopped(proc.pid), 10, "the stopped process")
        before = snapshot(workdir, store)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
    after_kill = snapshot(workdir, store)
    if store == "jsonl" and after_kill != before:
        trial.failures.append("the log changed between SIGSTOP and SIGKILL")
    # SQLite: a transaction whose commit frame reached the WAL before the stop is visible only
    # after WAL recovery, so the reference state is what any reader finds once the writer died.
    before = after_kill
    trial.state = crash_state(before)
    trial.committed = committed_count(before.lines)
    trial.kept = len(before.lines)
    trial.closers = len(expected_closers([decode(line) for line in before.lines])) if before.exists else 0
    if not before.exists:
        # Killed before the first flush: nothing was committed, so nothing can be lost. A
        # resume must say "not found" cleanly (the id is unknown to anyone but the dead run).
        return trial
    assert before.session_id is not None
    if mode == "cli":
        result = run_dsh(
            ["chat", "--config", str(config), "--resume", before.session_id, "--plain"],
            workdir,
            stdin="after the crash\n",
            timeout=120,
        )
        if result.returncode != 0:
            trial.failures.append(f"resume exited {result.returncode}: {result.stderr.strip()[-500:]}")
            return trial
        last_turn = max(
            (decode(line)["data"]["turn"] for line in before.lines if b'"turn/start"' in line), default=0
        )
        if f"[main turn {last_turn + 1}]" not in result.stdout:
            trial.failures.append(f"resumed transcript lacks turn {last_turn + 1}: {result.stdout[-300:]!r}")
    else:
        trial.failures += _resume_via_store(workdir, store, before.session_id)
    after = snapshot(workdir, store)
    trial.failures += check_resumed(before, after, resumed_by=mode)
    if not trial.failures:
        trial.failures += _verify_stable(workdir, store, before.session_id)
    return trial


def run_trials(
    base: Path,
    store: str,
    seeds: range | list[int],
    *,
    workers: int = 2,
    on_done: Callable[[Trial], None] | None = None,
) -> list[Trial]:
    """Run crash trials on a small thread pool (each trial is mostly waiting on subprocesses)."""
    from concurrent.futures import ThreadPoolExecutor

    trials: list[Trial] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for trial in pool.map(lambda seed: _guarded_trial(base, store, seed), seeds):
            trials.append(trial)
            if on_done is not None:
                on_done(trial)
    return trials


def _guarded_trial(base: Path, store: str, seed: int) -> Trial:
    try:
        return crash_trial(base, store, seed)
    except Exception as exc:  # a harness failure is a failed trial, with its seed
        trial = Trial(store, seed, "?")
        trial.failures.append(f"trial raised {type(exc).__name__}: {exc}")
        return trial


# -- lock races ------------------------------------------------------------------------------


def start_session(cwd: Path, store: str) -> tuple[Path, str]:
    """One finished ``dsh chat`` turn on the slow composition; returns (config, session id)."""
    config = write_composition(cwd, store=store, delay_ms=2)
    result = run_dsh(["chat", "--config", str(config), "--plain"], cwd, stdin="hello\n")
    assert result.returncode == 0, result.stderr
    session_id = snapshot(cwd, store).session_id
    assert session_id is not None
    return config, session_id


def locked_message(session_id: str) -> str:
    return f'dsh: session "{session_id}" is open in another process'


def _started_or_exited(chat: Chat) -> str:
    state = ""

    def decided() -> bool:
        nonlocal state
        if WELCOME in chat.out:
            state = "running"
        elif chat.proc.poll() is not None:
            state = "exited"
        return bool(state)

    wait_for(decided, 60, "a racer to start or exit")
    return state


def race_once(cwd: Path, config: Path, session_id: str, line: str) -> list[str]:
    """Start two ``dsh chat --resume`` of one session at once: exactly one must run (and write
    ``line`` as a new turn), the other must exit 1 with the one-line lock message."""
    problems: list[str] = []
    racers = [Chat(["--config", str(config), "--resume", session_id], cwd) for _ in range(2)]
    try:
        states = [_started_or_exited(racer) for racer in racers]
        if sorted(states) != ["exited", "running"]:
            return [f"racers ended up {states}: {[r.err[-300:] for r in racers]}"]
        winner, loser = racers[states.index("running")], racers[states.index("exited")]
        if loser.proc.returncode != 1 or loser.err.strip().splitlines() != [locked_message(session_id)]:
            problems.append(f"the loser exited {loser.proc.returncode} with {loser.err!r}")
        if loser.out:
            problems.append(f"the loser printed {loser.out!r}")
        winner.send(line)
        winner.wait_for("\n> ", 2)
        rc, _, err = winner.close()
        if rc != 0:
            problems.append(f"the winner exited {rc}: {err[-300:]}")
    finally:
        for racer in racers:
            racer.cleanup()
    return problems


def user_lines(snap: Snapshot) -> list[str]:
    """The user line of every turn in a stored log, in order."""
    return [
        event["data"]["content"][0]["text"]
        for event in map(decode, snap.lines)
        if event["type"] == "user/message"
    ]


# -- a deterministic base log for the corruption tests ------------------------------------------


BASE_LOG_TIME = 1_767_225_600_000  # 2026-01-01T00:00:00Z, every event of the base log


def build_base_log(
    root: Path, session_id: str = "base-session", *, open_turn: bool = False, compact: bool = False
) -> bytes:
    """A real agent-loop log (JSONL bytes): three turns, the second with two echo calls, the
    third with one, on a frozen clock. With ``open_turn`` the log ends inside a fourth turn, after
    a logged tool call (the state a crash repair must close with an interrupted tool result)."""
    from dsh.testing import Reply
    from dsh.tools import echo
    from tests.support.clock import frozen_clock
    from tests.support.rig import make_rig

    replies = [
        Reply(text="Plain ré\u00e9ply \U0001f600 \\ \"q\"", deltas=4),
        Reply(text="Calling twice", deltas=2, tool_calls=[("c-1", "echo", {"text": "a"}), ("c-2", "echo", {"text": "ü"})]),
        Reply(text="Both echoed.", deltas=3),
        Reply(text="Once", tool_calls=[("c-3", "echo", {"text": "x" * 40})]),
        Reply(text="Done.", deltas=2),
    ]

    lines = ("first", "second", "third")
    if compact:  # two turns, the second calling echo twice: a small log for exhaustive sweeps
        replies = [Reply(text="Hi \u00e9\U0001f600"), replies[1], Reply(text="Ok.")]
        lines = ("first", "second")

    async def go() -> bytes:
        rig = await make_rig(
            *replies, store=str(root), plugins=[echo], agent_id="main", cwd="/home/dev/project", session_id=session_id
        )
        for text in lines:
            await rig.say(text)
        path = Path(rig.store.locate(rig.session.header))
        await rig.dispose()
        data = path.read_bytes()
        if open_turn:
            turn, step, seq = len(lines) + 1, 1, data.count(b"\n") - 1
            user = {"kind": "user"}
            extra = [
                {"type": "turn/start", "seq": seq, "time": 1, "data": {"turn": turn, "trigger": {"kind": "message", "source": user}}},
                {"type": "user/message", "seq": seq + 1, "time": 1, "data": {"content": [{"type": "text", "text": "fourth"}], "source": user}, "surfaceOp": "append"},
                {"type": "step/start", "seq": seq + 2, "time": 1, "data": {"turn": turn, "step": step}},
                {"type": "assistant/message", "seq": seq + 3, "time": 1, "data": {"turn": turn, "step": step, "content": [{"type": "tool-call", "id": "c-9", "name": "echo", "arguments": "{}"}]}, "surfaceOp": "append"},
                {"type": "tool/call", "seq": seq + 4, "time": 1, "data": {"turn": turn, "step": step, "callId": "c-9", "name": "echo", "arguments": "{}"}},
            ]
            data += b"".join(
                json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" for e in extra
            )
        return data

    with frozen_clock(BASE_LOG_TIME):
        return asyncio.run(go())


# -- corruptions and their oracle --------------------------------------------------------------

CORRUPT_MESSAGE = re.compile(r"^(corrupt session log: .*|empty or header-less session log: .*)$", re.DOTALL)
LINE_NAMED = re.compile(r"file line (\d+)\b")  # the physical line (the header is line 1)


def first_damaged_line(original: bytes, corrupted: bytes) -> int:
    """1-based number of the first line of ``corrupted`` that is not a complete original line at
    the same place (a torn last fragment counts as damaged; an undamaged file gives n + 1)."""
    a = original.split(b"\n")[:-1]
    complete = corrupted.split(b"\n")[:-1]
    for index, line in enumerate(complete):
        if index >= len(a) or a[index] != line:
            return index + 1
    return len(complete) + 1


def check_corrupt_outcome(
    original: bytes,
    corrupted: bytes,
    after: bytes,
    outcome: BaseException | Any,
    *,
    loaded_lines: list[bytes] | None = None,
) -> str:
    """The corruption oracle for one JSONL ``load``; returns a label for statistics.

    Raises AssertionError when the contract broke: on a refusal the error must be a documented
    ``corrupt session log`` error (or an unsupported version), naming a line at or after the
    first damaged one, and the file must be byte-identical; on success every line before the
    first damaged one must be kept byte for byte, the file must be the corrupted file cut at a
    line boundary plus appended closers, and the loaded events must be exactly its lines.
    """
    from dsh.persistence.base import CorruptSessionLog, UnsupportedVersion

    damaged = first_damaged_line(original, corrupted)
    if isinstance(outcome, BaseException):
        if not isinstance(outcome, (CorruptSessionLog, UnsupportedVersion)):
            raise AssertionError(f"load raised {type(outcome).__name__}: {outcome}") from outcome
        text = str(outcome)
        assert "\n" not in text, f"multi-line error {text!r}"
        if isinstance(outcome, CorruptSessionLog):
            assert CORRUPT_MESSAGE.match(text), text
            named = LINE_NAMED.search(text)
            if named is not None:
                assert int(named.group(1)) >= damaged, f"{text!r} names a line before the damage (line {damaged})"
        assert after == corrupted, "a refused log was modified"
        if text.startswith("empty or header-less"):
            return "refused: empty or header-less session log"
        return "refused: " + re.sub(r"\d+", "N", text.split(": ", 1)[-1])[:60]
    intact = corrupted.split(b"\n")[:-1][: damaged - 1]
    assert after.startswith(b"".join(line + b"\n" for line in intact)), "bytes before the first damaged line changed"
    complete = corrupted.split(b"\n")[:-1]
    after_lines = after.split(b"\n")
    assert after_lines[-1] == b"", "the repaired log does not end with a newline"
    after_complete = after_lines[:-1]
    kept = 0
    while kept < min(len(after_complete), len(complete)) and after_complete[kept] == complete[kept]:
        kept += 1
    assert kept >= 1 and kept >= len(intact), "lines before the damage were dropped"
    added = [decode(line) for line in after_complete[kept:]]
    try:
        expected: list[dict[str, Any]] | None = expected_closers([decode(line) for line in after_complete[1:kept]])
    except (KeyError, TypeError, AttributeError, ValueError):
        expected = None  # kept events too odd for the oracle (a flip that still parses)
    if expected is not None:
        assert added == expected, f"appended {added}, expected the crash closers {expected}"
    for extra in added:
        assert extra["type"] in ("tool/result", "step/end", "turn/end"), f"unexpected added line {extra}"
    if loaded_lines is not None:
        assert loaded_lines == after_complete[1:], "loaded events differ from the file"
    cut = sum(len(line) + 1 for line in complete[:kept]) < len(corrupted)
    return f"loaded (closers={len(added)}, cut={cut})"


def corrupt(data: bytes, how: str, rng: random.Random) -> bytes:
    """One corruption of a JSONL log, chosen by ``how``, positioned by ``rng``."""
    lines = data.split(b"\n")[:-1]
    n = len(lines)
    if how == "truncate":
        return data[: rng.randrange(len(data) + 1)]
    if how == "flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(out))
            out[at] ^= 1 << rng.randrange(8)
        return bytes(out)
    if how == "duplicate-line":
        i = rng.randrange(n)
        return b"".join(x + b"\n" for x in [*lines[:i + 1], lines[i], *lines[i + 1:]])
    if how == "missing-line":
        i = rng.randrange(n)
        return b"".join(x + b"\n" for x in lines[:i] + lines[i + 1 :])
    if how == "swap-lines":
        i = rng.randrange(max(1, n - 1))
        j = min(n - 1, i + 1)
        swapped = list(lines)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        return b"".join(x + b"\n" for x in swapped)
    if how == "wrong-header":
        header = json.loads(lines[0])
        variant = rng.choice(["version", "id", "type", "createdAt", "not-json", "empty", "array"])
        if variant == "version":
            header["version"] = rng.choice([1, 2, -1, 0.5, "0"])
        elif variant == "id":
            header["id"] = header["id"] + "-other"
        elif variant == "type":
            header["type"] = "sessio"
        elif variant == "createdAt":
            header["createdAt"] = "yesterday"
        new = json.dumps(header, separators=(",", ":")).encode()
        if variant == "not-json":
            new = lines[0][: len(lines[0]) // 2]
        elif variant == "empty":
            new = b""
        elif variant == "array":
            new = b"[]"
        return b"\n".join([new, *lines[1:]]) + b"\n"
    if how == "invalid-utf8":
        i = rng.randrange(n)
        line = lines[i]
        at = rng.randrange(len(line) + 1)
        bad = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80", b"\xf8\x88\x80\x80\x80"])
        lines = [*lines[:i], line[:at] + bad + line[at:], *lines[i + 1 :]]
        return b"".join(x + b"\n" for x in lines)
    if how == "huge-line":
        i = rng.randrange(1, n + 1)
        size = rng.choice([1 << 20, 6 << 20])
        kind = rng.choice(["garbage", "json-string", "deep"])
        if kind == "garbage":
            huge = bytes(rng.randrange(32, 127) for _ in range(256)) * (size // 256)
        elif kind == "json-string":
            huge = b'{"type":"note","seq":0,"time":1,"data":"' + b"x" * size + b'"}'
        else:
            huge = b"[" * size
        return b"".join(x + b"\n" for x in [*lines[:i], huge, *lines[i:]])
    if how == "newline-inside":
        i = rng.randrange(n)
        line = lines[i]
        at = rng.randrange(len(line) + 1)
        lines = [*lines[:i], line[:at], line[at:], *lines[i + 1 :]]
        return b"".join(x + b"\n" for x in lines)
    raise ValueError(how)


CORRUPTIONS = (
    "truncate",
    "flip",
    "duplicate-line",
    "missing-line",
    "swap-lines",
    "wrong-header",
    "invalid-utf8",
    "huge-line",
    "newline-inside",
)


async def check_jsonl_corruption(
    root: Path, original: bytes, corrupted: bytes, session_id: str = "base-session"
) -> str:
    """Write ``corrupted`` as a JSONL session under ``root``, ``read`` and ``load`` it, and apply
    :func:`check_corrupt_outcome`; a successful load must also be stable (a second load repairs
    nothing and leaves the file as it is). Returns the outcome label."""
    from dsh.persistence.jsonl import JsonlStore
    from dsh.session import encode_event

    path = root / "cwd-000000000000" / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(corrupted)
    store = JsonlStore(root)
    try:
        read_outcome: Any = await store.read(session_id)
    except Exception as exc:
        read_outcome = exc
    assert path.read_bytes() == corrupted, "read() modified the file"
    try:
        loaded = await store.load(session_id)
    except Exception as exc:
        label = check_corrupt_outcome(original, corrupted, path.read_bytes(), exc)
        if not isinstance(read_outcome, Exception):
            raise AssertionError(f"read() accepted what load() refused: {exc}") from exc
        return label
    finally:
        await store.close()
    if isinstance(read_outcome, Exception):
        raise AssertionError(f"load() accepted what read() refused: {read_outcome}")
    after = path.read_bytes()
    label = check_corrupt_outcome(
        original, corrupted, after, loaded, loaded_lines=[encode_event(e) for e in loaded.events]
    )
    again = JsonlStore(root)
    try:
        second = await again.load(session_id)
        assert second.repaired == 0 and second.truncated_bytes == 0, "repair is not stable"
    finally:
        await again.close()
    assert path.read_bytes() == after, "a second load changed the file"
    return label


def scratch_dir() -> str | None:
    """A RAM-backed folder for the many small loads (fsync is free there), if there is one."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def load_corrupted_jsonl(original: bytes, corrupted: bytes, session_id: str = "base-session") -> str:
    with tempfile.TemporaryDirectory(dir=scratch_dir()) as root:
        return asyncio.run(check_jsonl_corruption(Path(root), original, corrupted, session_id))
