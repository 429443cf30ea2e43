"""The library API end to end: the README's example in real processes, typed tools through a
scripted model, errors after durability, resume across processes and the one-writer rule."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dsh
from dsh.testing import Reply, ScriptedAdapter

ROOT = Path(__file__).resolve().parents[2]


def _readme_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Library API") : text.index("## Architecture")]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def _python(code: str, cwd: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TZ": "UTC"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _log(path: Path) -> list[dict[str, object]]:
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines[1:]]


@pytest.mark.slow
def test_readme_example_runs_and_resumes_in_a_new_process(tmp_path: Path) -> None:
    first, second = _readme_blocks()
    run1 = _python(first, tmp_path)
    assert run1.returncode == 0, run1.stderr
    assert run1.stdout.splitlines()[0] == "tool: HELLO"  # the custom typed tool ran
    assert "{'kind': 'completed'} You said: \"thanks\"" in run1.stdout
    (log_file,) = (tmp_path / "sessions").glob("cwd-*/demo.jsonl")
    events = _log(log_file)
    results = [e for e in events if e["type"] == "tool/result"]
    assert results[0]["data"]["content"] == [{"type": "text", "text": "HELLO"}]
    assert [e["data"]["turn"] for e in events if e["type"] == "turn/end"] == [1, 2]

    run2 = _python(second, tmp_path)  # another process continues the same session
    assert run2.returncode == 0, run2.stderr
    assert run2.stdout.startswith("demo {'kind': 'completed'} You said: \"Time sampled while preparing turn 3")
    events = _log(log_file)
    assert [e["data"]["turn"] for e in events if e["type"] == "turn/end"] == [1, 2, 3]
    headers = [e for e in events if e["type"] == "request/header"]
    assert headers[-1]["data"]["reason"] == "resume"


@dsh.tool
async def lookup(city: str, days: int = 1) -> str:
    """Look up the forecast for a city."""
    CALLS.append((city, days))
    return f"{city}: sunny for {days} days"


CALLS: list[tuple[str, int]] = []


def _tool_results(result: dsh.RunResult) -> list[dict[str, object]]:
    return [dict(e.data) for e in result.events if e.type == "tool/result"]


async def test_typed_tool_is_called_with_validated_arguments() -> None:
    CALLS.clear()
    model = ScriptedAdapter([Reply(tool_calls=[("c1", "lookup", {"city": "Paris", "days": 2})]), "Sunny."])
    async with dsh.Agent(model=model, tools=[lookup], time_context=False, instructions="Be terse.") as agent:
        result = await agent.run("weather?")
    assert CALLS == [("Paris", 2)]
    assert result.text == "Sunny."
    assert result.reason == {"kind": "completed"}
    (tool_result,) = _tool_results(result)
    assert tool_result["content"] == [{"type": "text", "text": "Paris: sunny for 2 days"}]
    assert tool_result["isError"] is False
    request = model.requests[0]
    assert request.system == "Be terse."  # instructions replace the default system prompt
    assert request.tools == [lookup.schema()]
    assert result.session_id.startswith("session-")
    assert [e.seq for e in result.events] == list(range(result.events[0].seq, result.events[-1].seq + 1))


@pytest.mark.parametrize(
    ("arguments", "detail"),
    [
        ({"days": 2}, "$: missing required property"),
        ({"city": "Paris", "days": "two"}, "$.days: expected integer, got string"),
        ({"city": "Paris", "when": "now"}, "Additional properties are not allowed"),
        ("{not json", "not valid JSON"),
    ],
)
async def test_mismatched_arguments_are_a_model_visible_error_and_the_function_is_not_called(
    arguments: object, detail: str
) -> None:
    CALLS.clear()
    model = ScriptedAdapter([Reply(tool_calls=[("c1", "lookup", arguments)]), "ok"])  # type: ignore[list-item]
    async with dsh.Agent(model=model, tools=[lookup], time_context=False) as agent:
        result = await agent.run("weather?")
    assert CALLS == []
    (tool_result,) = _tool_results(result)
    assert tool_result["isError"] is True
    text = tool_result["content"][0]["text"]  # type: ignore[index]
    assert text.startswith("Error: ") and detail in text
    # The model saw the error in its next request.
    last = model.requests[1].messages[-1]
    assert last["content"][0]["type"] == "tool-result" and detail in json.dumps(last["content"])


async def test_run_stream_yields_the_durable_events_as_appended(tmp_path: Path) -> None:
    model = ScriptedAdapter([Reply(text="hello there", deltas=3)])
    async with dsh.Agent(model=model, store=str(tmp_path), time_context={"timeZone": "UTC"}) as agent:
        seen = [event async for event in agent.run_stream("hi", session_id="s")]
        session_events = list(agent._runtime.agents["s"].session.events)  # type: ignore[union-attr]
    assert seen == session_events  # every event, in seq order, the very objects logged
    types = [e.type for e in seen]
    assert types[:2] == ["turn/start", "user/message"] and types[-1] == "turn/end"
    assert types.count("assistant/chunk") >= 3 and "context/message" in types  # time-context
    (log_file,) = tmp_path.glob("cwd-*/s.jsonl")
    assert len(_log(log_file)) == len(seen)  # durable once the stream ends


async def test_a_turn_that_ends_in_error_raises_run_error_after_the_events_are_durable(tmp_path: Path) -> None:
    model = ScriptedAdapter([Reply(error=RuntimeError("model is down"))])
    agent = dsh.Agent(model=model, store=str(tmp_path), time_context=False)
    with pytest.raises(dsh.RunError) as caught:
        await agent.run("hi", session_id="broken")
    error = caught.value
    assert error.reason["kind"] == "error" and "model is down" in str(error)
    assert error.session_id == "broken" and error.events[-1].type == "turn/end"
    # Durable before the raise: the file already holds the turn end, in this very process.
    (log_file,) = tmp_path.glob("cwd-*/broken.jsonl")
    assert _log(log_file)[-1]["type"] == "turn/end"
    await agent.aclose()


_HOLDER = textwrap.dedent(
    """
    import asyncio, sys, dsh

    async def main():
        async with dsh.Agent(store=sys.argv[1], time_context=False) as agent:
            await agent.run("first", session_id="shared")
            print("held", flush=True)
            sys.stdin.readline()

    asyncio.run(main())
    """
)


async def test_same_session_id_resumes_and_a_session_open_elsewhere_is_refused(tmp_path: Path) -> None:
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLDER, str(tmp_path),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdin is not None
    assert (await asyncio.wait_for(holder.stdout.readline(), 60)).strip() == b"held"
    agent = dsh.Agent(store=str(tmp_path), time_context=False)
    with pytest.raises(dsh.SessionLocked, match='session "shared" is open in another process'):
        await agent.run("second", session_id="shared")
    holder.stdin.write(b"\n")
    await holder.stdin.drain()
    assert await asyncio.wait_for(holder.wait(), 60) == 0
    result = await agent.run("second", session_id="shared")  # now it resumes: turn 2
    turn_ends = [e for e in result.events if e.type == "turn/end"]
    assert [e.data["turn"] for e in turn_ends] == [2]
    assert result.text == 'You said: "second". Try "echo <something>" to see a tool call.'
    again = await agent.run("third", session_id="shared")  # the live session, in this process
    assert again.events[0].seq == result.events[-1].seq + 1
    await agent.aclose()


def test_sqlite_store_string_and_run_sync(tmp_path: Path) -> None:
    spec = f"sqlite:///{tmp_path}/dsh.db"
    first = dsh.Agent(store=spec, time_context=False).run_sync("one", session_id="q")
    second = dsh.Agent(store=spec, time_context=False).run_sync("two", session_id="q")
    assert second.events[0].seq == first.events[-1].seq + 1
    assert (tmp_path / "dsh.db").is_file()


async def test_run_sync_inside_an_event_loop_is_refused() -> None:
    with pytest.raises(RuntimeError, match=r"use await agent\.run"):
        dsh.Agent(time_context=False).run_sync("hi")


@pytest.mark.slow
def test_import_dsh_is_cheap_and_exports_the_user_names() -> None:
    code = (
        "import sys, dsh\n"
        "heavy = [m for m in ('dsh.persistence.postgres', 'dsh.agent', 'psycopg', 'dsh.runtime') if m in sys.modules]\n"
        "print(heavy)\n"
        "print(sorted(n for n in dsh.__all__ if not hasattr(dsh, n)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "[]"]


def _postgres_dsn() -> str | None:
    dsn = os.environ.get("DSH_TEST_DATABASE_URL", "postgresql://127.0.0.1:5432/test")
    try:
        import psycopg

        with psycopg.connect(dsn, connect_timeout=3):
            return dsn
    except Exception:
        return None


async def test_postgres_store_string_resumes(tmp_path: Path) -> None:
    dsn = _postgres_dsn()
    if dsn is None:
        pytest.skip("no PostgreSQL server answers")
    session_id = f"lib-{os.getpid()}-{tmp_path.name}"
    async with dsh.Agent(store=dsn, time_context=False) as agent:
        first = await agent.run("one", session_id=session_id)
    async with dsh.Agent(store=dsn, time_context=False) as agent:
        second = await agent.run("two", session_id=session_id)
        assert second.events[0].seq == first.events[-1].seq + 1
        store = agent._runtime.ctx.session_store  # type: ignore[union-attr]
    # Clean up through a fresh store (the agent released its lock on close).
    async with dsh.Agent(store=dsn, time_context=False) as cleaner:
        await cleaner._ensure_runtime()
        await cleaner._runtime.ctx.session_store.remove(session_id)  # type: ignore[union-attr]
    assert store.kind == "postgres"


async def test_leaving_run_stream_early_cancels_the_running_turn(tmp_path: Path) -> None:
    model = ScriptedAdapter([Reply(text="a slow reply", deltas=6, delay=0.05), "next"])
    async with dsh.Agent(model=model, store=str(tmp_path), time_context=False) as agent:
        async for event in agent.run_stream("hi", session_id="s"):
            if event.type == "assistant/chunk":
                break
        after = await agent.run("again", session_id="s")
    assert after.text == "next"
    (log_file,) = tmp_path.glob("cwd-*/s.jsonl")
    reasons = [e["data"]["reason"] for e in _log(log_file) if e["type"] == "turn/end"]
    assert reasons == [{"kind": "aborted", "reason": "run_stream closed"}, {"kind": "completed"}]


def test_a_bad_store_spec_fails_when_the_agent_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(dsh.UsageError, match='unknown scheme "mysql"'):
        dsh.Agent(store="mysql://h/db")
    monkeypatch.chdir(tmp_path)
    agent = dsh.Agent(store="rel", time_context=False)  # resolved now, against this folder
    monkeypatch.chdir("/")
    agent.run_sync("hi", session_id="here")
    assert list((tmp_path / "rel").glob("cwd-*/here.jsonl"))
