"""Hostile input: session ids, YAML compositions and model tool-call arguments.

Complements ``tests/persistence/test_jsonl.py::test_hostile_ids_stay_inside_the_root`` (a fixed
list of ids through the JSONL store) and ``tests/runtime/test_runtime_loader.py`` (the YAML
loader's unit tests): here ids are generated (both stores, every store operation, checked with
``os.walk`` against the whole surrounding folder), the CLI is driven with traversal ids and
hostile YAML (timed), and a scripted model sends huge and malformed tool-call arguments.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.persistence.base import InvalidSessionId, SessionNotFound
from dsh.persistence.jsonl import JsonlStore
from dsh.persistence.sqlite import SqliteStore
from dsh.runtime.loader import LoadError, parse_config
from dsh.session import Session
from dsh.testing import Reply
from dsh.tools import echo
from tests.reliability.support import run_dsh, scratch_dir
from tests.support.rig import Rigs

# -- session ids -------------------------------------------------------------------------------

PIECES = ["/", "\\", ".", "..", "../", "\x00", "~", "~002E", "%2e", ":", " ", "\n", "\t", "a", "Z9",
          "é", "\u202e", "😀", "\ud800", "\udfff", "-", "_", "CON", "*", "?", "\x1b[2J"]
IDS = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=12).map("".join),
    st.text(max_size=40),
    st.integers(1, 400).map(lambda n: "é" * n),
    st.integers(190, 260).map(lambda n: "a" * n),
)


LITERAL = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def _unstorable(session_id: str) -> bool:
    """Empty, a lone surrogate, or longer than 200 characters once encoded (docs/stores.md)."""
    if not session_id or any(0xD800 <= ord(c) <= 0xDFFF for c in session_id):
        return True
    units = len(session_id.encode("utf-16-le")) // 2
    literal = sum(1 for c in session_id if c in LITERAL) if session_id.strip(".") else 0
    return literal + 5 * (units - literal) > 200


def _walk(folder: Path) -> set[str]:
    found = set()
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(top, name), folder))
    return found


def _closed_session(session_id: str) -> Session:
    session = Session(session_id, header={"version": 0, "id": session_id, "createdAt": 5, "cwd": "/x/../.."})
    user = {"kind": "user"}
    session.append("turn/start", {"turn": 1, "trigger": {"kind": "message", "source": user}})
    session.append("user/message", {"content": [{"type": "text", "text": "hi"}], "source": user}, surface_op="append")
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    return session


async def _exercise(store: Any, session_id: str) -> str:
    """create, append, list, read, load, remove; ``"ok"`` or ``"refused"`` (InvalidSessionId)."""
    try:
        session = _closed_session(session_id)
    except Exception:
        session = None
    if session is None:  # the session core refuses the id itself (e.g. a lone surrogate)
        try:
            await store.create({"version": 0, "id": session_id, "createdAt": 5})
        except InvalidSessionId:
            return "refused"
        raise AssertionError(f"store accepted an id the session core refuses: {session_id!r}")
    try:
        await store.create(dict(session.header))
    except InvalidSessionId:
        for call in (store.load, store.read, store.remove):
            try:
                await call(session_id)
            except (InvalidSessionId, SessionNotFound):
                pass
            else:
                raise AssertionError(f"{call.__name__} accepted a refused id {session_id!r}")
        return "refused"
    await store.append(session_id, list(session.events))
    await store.release(session_id)
    assert [info.id for info in await store.list()] == [session_id]
    assert len((await store.read(session_id)).events) == 3
    assert len((await store.load(session_id)).events) == 3
    await store.release(session_id)
    await store.remove(session_id)
    assert await store.list() == []
    return "ok"


@pytest.mark.slow
@settings(max_examples=120, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(session_id=IDS, kind=st.sampled_from(["jsonl", "sqlite"]))
def test_generated_ids_never_escape_the_store(session_id: str, kind: str) -> None:
    with tempfile.TemporaryDirectory(dir=scratch_dir()) as top:
        outer = Path(top)
        (outer / "canary").mkdir()
        if kind == "jsonl":
            store: Any = JsonlStore(outer / "store" / "root")
            inside = "store"
        else:
            store = SqliteStore(outer / "store" / "db.sqlite3")
            inside = "store"

        async def go() -> str:
            try:
                return await _exercise(store, session_id)
            finally:
                await store.close()

        outcome = asyncio.run(go())
        outside = {p for p in _walk(outer) if p.split(os.sep)[0] not in (inside, "canary")}
        assert not outside, f"{session_id!r} created {outside}"
        assert _walk(outer / "canary") == set()
        if outcome == "refused":
            assert _unstorable(session_id), f"refused a storable id {session_id!r}"
        else:
            assert not _unstorable(session_id), f"accepted {session_id!r}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("hostile", "commands"),
    [
        ("../../etc/passwd", ["chat", "show", "rm", "chat-sqlite"]),
        ("../victim", ["chat", "show"]),
        ("/etc/passwd", ["chat"]),
        ("..", ["chat", "rm"]),
        ("é/../../x", ["chat"]),
        ("a" * 300, ["chat", "show"]),
    ],
)
def test_cli_traversal_ids_are_clean_errors(tmp_path: Path, hostile: str, commands: list[str]) -> None:
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    victim = tmp_path / "a" / "victim.jsonl"
    victim.write_text('{"type":"session","version":0,"id":"../victim","createdAt":1}\n')
    before = _walk(tmp_path)
    argv = {
        "chat": ["chat", "--resume", hostile],
        "show": ["sessions", "show", hostile],
        "rm": ["sessions", "rm", hostile, "--yes"],
        "chat-sqlite": ["chat", "--store", "sqlite", "--resume", hostile],
    }
    for command in commands:
        result = run_dsh(argv[command], cwd, stdin="hi\n")
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("dsh: ") and "Traceback" not in result.stderr
        assert "not found" in line or "too long for a file name" in line, line
        assert result.stdout == ""
    created = _walk(tmp_path) - before
    # At most the store's own (empty) folders inside ./.sessions: never a file, never elsewhere.
    assert all(p.startswith(os.path.join("a", "b", ".sessions")) for p in created), created
    assert not [p for p in created if (tmp_path / p).is_file() and (tmp_path / p).stat().st_size]
    assert victim.read_text().startswith('{"type":"session"')


# -- YAML ----------------------------------------------------------------------------------------

BOMB = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]",
        "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]",
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]",
        "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]",
        "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]",
        "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]",
        "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]",
        "i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]",
    ]
)
HOSTILE_YAML = {
    "python-tag": '- id: x\n  name: echo-llm\n  config: !!python/object/apply:os.system ["touch PWNED"]\n',
    "python-name": "- id: x\n  name: !!python/name:os.system echo-llm\n",
    "js-tag": "- id: x\n  name: echo-llm\n  config:\n    key: !!js process.env.HOME\n",
    "custom-tag": "- id: x\n  name: !plugin echo-llm\n",
    "billion-laughs": BOMB + "\n",
    "bomb-in-config": "- id: x\n  name: echo-llm\n  config:\n" + "".join(f"    {line}\n" for line in BOMB.splitlines()),
    "recursive-alias": "- &x [*x]\n",
    "deep-nesting": "[" * 50_000 + "]" * 50_000 + "\n",
}


def test_bomb_in_config_is_really_a_bomb() -> None:
    text = HOSTILE_YAML["bomb-in-config"]
    assert "*h,*h" in text
    with pytest.raises(LoadError, match="expands to more than"):
        parse_config(text)


@pytest.fixture(scope="module")
def cli_baseline(tmp_path_factory: pytest.TempPathFactory) -> float:
    """Seconds for ``dsh chat --config`` to refuse a trivially useless composition."""
    folder = tmp_path_factory.mktemp("baseline")
    (folder / "baseline.yml").write_text("[]\n")
    timings = []
    for _ in range(2):
        started = time.perf_counter()
        result = run_dsh(["chat", "--config", "baseline.yml"], folder, stdin="hi\n")
        timings.append(time.perf_counter() - started)
        assert result.returncode == 2, result.stderr
    return max(timings)


@pytest.mark.perf
@pytest.mark.parametrize("kind", sorted(HOSTILE_YAML))
def test_hostile_yaml_is_refused_quickly(tmp_path: Path, kind: str, cli_baseline: float) -> None:
    started = time.perf_counter()
    with pytest.raises(LoadError):
        parse_config(HOSTILE_YAML[kind], source="hostile.yml")
    assert time.perf_counter() - started < 1.0

    (tmp_path / "hostile.yml").write_text(HOSTILE_YAML[kind])
    timings = []
    for _ in range(3):  # the best of up to three runs: a loaded machine only ever adds time
        started = time.perf_counter()
        result = run_dsh(["chat", "--config", "hostile.yml"], tmp_path, stdin="hi\n")
        timings.append(time.perf_counter() - started)
        assert result.returncode == 2, (result.stdout, result.stderr)
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("dsh: hostile.yml") and "Traceback" not in result.stderr, line
        if timings[-1] < cli_baseline + 1.0:
            break
    # The refusal itself costs well under a second on top of starting Python and dsh.
    assert min(timings) < cli_baseline + 1.0, (timings, cli_baseline)
    assert not (tmp_path / "PWNED").exists()
    assert not (tmp_path / ".sessions").exists()


# -- tool-call arguments -----------------------------------------------------------------------

FIVE_MB = 5 * 1024 * 1024

ARGUMENTS = {
    "huge-valid": json.dumps({"text": "x" * FIVE_MB}),
    "huge-unterminated": '{"text": "' + "x" * FIVE_MB,
    "huge-garbage": "\x00\x01\x1b" * (1 << 18),  # control characters: 6x larger once JSON-escaped
    "not-json": "echo this please",
    "wrong-type": '{"text": 42}',
    "array": "[1, 2, 3]",
    "null": "null",
    "nan": '{"text": NaN}',
    "huge-number": '{"text": 1e999999}',
    "duplicate-keys": '{"text": "a", "text": "b"}',
    "empty": "",
    "deep-nesting": "[" * 100_000,
    "lone-surrogate": '{"text": "\\ud800"}',
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(ARGUMENTS))
async def test_hostile_tool_arguments_are_contained(tmp_path: Path, kind: str, rigs: Rigs) -> None:
    arguments = ARGUMENTS[kind]
    rig = await rigs.make(
        Reply(text="calling", tool_calls=[("call-1", "echo", arguments)]),
        Reply(text="done"),
        default=Reply(text="again"),
        store=str(tmp_path / "sessions"),
        record=["agent/error"],
        plugins=[echo],
        agent_id="main",
        cwd="/project",
    )
    agent = rig.main
    for text in ("go", "and again"):
        agent.send([{"type": "text", "text": text}])
        await asyncio.sleep(0)
        await asyncio.wait_for(agent.when_idle(), 60)
    events = agent.session.events
    calls = [e for e in events if e.type == "tool/call"]
    results = [e for e in events if e.type == "tool/result"]
    assert [c.data["arguments"] for c in calls] == [arguments]
    assert [r.data["callId"] for r in results] == ["call-1"], "every tool call gets exactly one result"
    ends = [e.data["reason"] for e in events if e.type == "turn/end"]
    assert ends == [{"kind": "completed"}, {"kind": "completed"}], (ends, rig.errors)
    assert not rig.errors
    result = results[0].data
    text = result["content"][0]["text"]
    if kind == "huge-valid":
        assert not result["isError"] and text == "ECHO: " + "X" * FIVE_MB
    elif kind == "duplicate-keys":  # valid JSON: the last key wins, as in every JSON parser
        assert not result["isError"] and text == "ECHO: B"
    elif kind == "lone-surrogate":  # echo accepts it; the log cannot hold its result
        assert result["isError"] and "cannot record" in text
        assert result["error"] == {"name": "InvalidToolResult", "code": "INVALID_TOOL_RESULT"}
    else:
        # Refused by the registry's schema check before the tool runs, in one short line.
        assert result["isError"] and text.startswith('Error: invalid arguments for tool "echo": '), text[:200]
        assert len(text) < 200 and result["error"]["code"] == "INVALID_ARGUMENTS", text[:200]
    path = Path(rig.store.locate(agent.session.header))
    await rig.dispose()
    # The log with the hostile arguments in it loads back exactly.
    store = JsonlStore(tmp_path / "sessions")
    try:
        loaded = await store.load(agent.session.id)
        assert loaded.repaired == 0
        assert [e.seq for e in loaded.events] == list(range(len(agent.session.events)))
    finally:
        await store.close()
    assert path.stat().st_size > len(arguments)
