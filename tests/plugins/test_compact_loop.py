"""compact in the real agent loop: triggers, events, failures, aborts, manual compaction, time."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.fixtures import FIXTURES
from tests.plugins._pairing import tool_pairing_depths
from tests.support.clock import Clock
from tests.support.rig import Rig, Rigs, make_rig
from tests.support.wait import wait_until

from dsh.agent import Agent, AgentOptions
from dsh.llm.types import LlmError
from dsh.persistence.base import StoredSession
from dsh.plugins import compact, time_context
from dsh.plugins.compact import (
    CHECKPOINT_PREAMBLE,
    SUMMARIZER_SYSTEM_PROMPT,
    CompactionError,
    Compactor,
    CompactResult,
    render_transcript,
    summarizer_prompt,
)
from dsh.runtime import AbortController, Context
from dsh.session import Event, Session, project
from dsh.testing import Reply, ScriptedAdapter
from dsh.tools import define_tool

needs_fixtures = pytest.mark.skipif(
    not FIXTURES.is_dir(), reason="reference fixtures not available"
)

T0 = 1_783_990_800_000  # 2026-07-14T01:00:00Z
SYSTEM = "You are an AI agent powered by the DeepSeek Harness SDK."
SOURCE = {"kind": "plugin", "plugin": "compact"}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S") + "+00:00"


@pytest.fixture
def clock_start() -> int:
    return T0


def config(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "contextWindow": 1300,
        "thresholdRatio": 0.5,
        "retainTokens": 100,
        "summarizationModel": "summarizer",
        "maxTokens": 1024,
        "compactionRetries": 0,
    }
    base.update(overrides)
    return base


@dataclass
class Probe:
    turn: int
    step: int
    pressure: int


class CompactRig(Rig):
    """The shared rig with compact (and optionally time-context), the scripted model (default
    "ok") and the summarizer model (default "Short summary.")."""

    def __init__(self, ctx: Context, model: ScriptedAdapter, clock: Clock | None = None) -> None:
        super().__init__(ctx, model, clock)
        self.probes: list[Probe] = []
        self.flushed: list[str] = []

    @property
    def summarizer(self) -> ScriptedAdapter:
        return self.adapters["summarizer"]

    @property
    def flushes(self) -> int:
        return len(self.flushed)

    @property
    def compactor(self) -> Compactor:
        value: Compactor = self.ctx.compact
        return value

    def turn_events(self, turn: int) -> list[Event]:
        out: list[Event] = []
        inside = False
        for event in self.session.events:
            if event.type == "turn/start":
                inside = event.data["turn"] == turn
            if inside:
                out.append(event)
        return out


async def build(
    rigs: Rigs,
    clock: Clock,
    compact_config: dict[str, Any] | None = None,
    *,
    tc: dict[str, Any] | None = None,
    compact_first: bool = True,
    dev_checks: bool = True,
) -> CompactRig:
    probes: list[Probe] = []
    flushed: list[str] = []

    def probe(agent: Agent, turn: int, step: int, system: str, prefix: Any, signal: Any) -> None:
        compactor = agent.ctx.get("compact")
        if compactor is not None:
            probes.append(Probe(turn, step, compactor.pressure(agent.session, system, prefix)))

    async def on_flush(session: Session) -> None:
        flushed.append(session.id)

    def tick(args: Any, call: Any) -> list[dict[str, Any]]:
        clock.advance(int(args.get("ms", 0)))
        return [text("ticked")]

    plugins: list[Any] = [(compact, compact_config or config())]
    if tc is not None:
        plugins.insert(len(plugins) if compact_first else 0, (time_context, tc))
    rig = await rigs.make(
        default=Reply(text="ok"),
        adapters={"summarizer": ScriptedAdapter(default=Reply(text="Short summary."))},
        loop_config={"devChecks": dev_checks},
        # ordinary: after time-context, before compact
        listeners=[("agent/pre-step", probe), ("session/flush", on_flush)],
        plugins=plugins,
        tools=[define_tool(name="tick", description="Advance the clock.", execute=tick)],
        clock=clock,
        agent_id="main",
        session_id="s1",
        cwd="/tmp/project",
        rig_class=CompactRig,
    )
    rig.probes, rig.flushed = probes, flushed
    return rig


class FakeAgent:
    """Just what compaction reads of an agent: a session and a model."""

    def __init__(self, session: Session, model: str = "scripted") -> None:
        self.id = "fake"
        self.session = session
        self.options = AgentOptions(model=model)
        self.status = "idle"
        self.driver = None
        self.queued: list[Any] = []


def open_session(*texts: str, reply: str = "") -> Session:
    session = Session("fake")
    session.append(
        "turn/start", {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}}
    )
    for t in texts:
        session.append(
            "user/message", {"content": [text(t)], "source": {"kind": "user"}}, surface_op="append"
        )
        if reply:
            session.append(
                "assistant/message",
                {"turn": 1, "step": 1, "content": [text(reply)]},
                surface_op="append",
            )
    return session


async def fake_rig(clock: Clock, **overrides: Any) -> tuple[Context, ScriptedAdapter]:
    """The shared rig with compact (``config(**overrides)``), for a :class:`FakeAgent`."""
    summarizer = ScriptedAdapter(default=Reply(text="Short summary."))
    rig = await make_rig(
        models=(), adapters={"summarizer": summarizer}, plugins=[(compact, config(**overrides))], clock=clock
    )
    return rig.ctx, summarizer


def compaction_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "dsh.compact" and r.levelno == logging.WARNING
    ]


# -- the reference fixtures, replayed through the loop -----------------------------------------


def fixture_lines(name: str) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in (FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    ]


@needs_fixtures
@pytest.mark.parametrize("name", ["compaction-replace", "compaction-reconsolidate"])
async def test_replaying_the_fixture_reproduces_its_log(
    name: str, clock: Clock, rigs: Rigs, caplog: pytest.LogCaptureFixture
) -> None:
    lines = fixture_lines(name)
    expected = lines[1:]
    summaries = [
        e["data"]["summary"][0]["text"] for e in expected if e["type"] == "compact/summary"
    ]
    replies = []
    for e in expected:
        if e["type"] == "assistant/message":
            content = e["data"]["content"]
            replies.append(
                Reply(
                    text="".join(b["text"] for b in content if b["type"] == "text"),
                    tool_calls=[
                        (b["id"], b["name"], b["arguments"])
                        for b in content
                        if b["type"] == "tool-call"
                    ],
                    usage=e["data"]["usage"],
                    deltas=3,
                )
            )
    summarizer = ScriptedAdapter([Reply(text=s) for s in summaries])
    results = [e for e in expected if e["type"] == "tool/result"]

    def zones(args: Any, call: Any) -> list[dict[str, Any]]:
        result = results.pop(0)
        clock.set(result["time"])
        content: list[dict[str, Any]] = result["data"]["content"]
        return content

    account_zones = define_tool(
        name="account_zones",
        description="Count billing accounts per billing time zone.",
        parameters={
            "type": "object",
            "properties": {"filter": {"type": "string"}},
            "required": ["filter"],
        },
        execute=zones,
    )
    rig = await rigs.make(
        *replies,
        adapters={"summarizer": summarizer},
        loop_config={"devChecks": True},
        plugins=[(compact, config()), (time_context, {"timeZone": "Asia/Shanghai"})],
        tools=[account_zones],
        clock=clock,
    )
    clock.set(expected[0]["time"])
    agent = rig.agent(session_id=name, cwd="/home/dev/billing")
    for i, e in enumerate(expected):
        if e["type"] == "turn/start":
            clock.set(e["time"])
            agent.send(expected[i + 1]["data"]["content"])
            await agent.when_idle()

    session = agent.session
    got = [e.to_json() for e in session.events]
    assert len(got) == len(expected)
    compactions = [e["seq"] for e in expected if e["type"] == "compact/summary"]
    for mine, theirs in zip(got, expected, strict=True):
        assert mine["type"] == theirs["type"] and mine["seq"] == theirs["seq"]
        assert mine.get("surfaceOp") == theirs.get("surfaceOp")
        assert mine.get("sourceEventSeqs") == theirs.get("sourceEventSeqs")
        if theirs["type"] == "turn/start" or theirs["type"] == "context/message":
            assert mine["time"] == theirs["time"]
        if mine["type"] == "user/message" and mine["data"]["source"] == SOURCE:
            head, *rest = mine["data"]["content"]
            assert rest == theirs["data"]["content"][1:]
            assert head["text"].startswith(
                CHECKPOINT_PREAMBLE + "\n\nCovers 2026-07-14T09:00:00+08:00 to "
            )
            assert head["text"].endswith("+08:00.\n\n<compacted-summary>")
        elif mine["type"] == "compact/summary" and mine["seq"] != compactions[0]:
            # The second compaction shadows our own (differently worded) checkpoint.
            mine_data = dict(mine["data"])
            theirs_data = dict(theirs["data"])
            assert mine_data.pop("shadowedTokenCount") > 0
            theirs_data.pop("shadowedTokenCount")
            assert mine_data == theirs_data
        else:
            assert mine["data"] == theirs["data"], mine["seq"]

    checkpoints = [
        e for e in session.events if e.type == "user/message" and e.data["source"] == SOURCE
    ]
    spans = [e.data["content"][0]["text"].split("\n\n")[1] for e in checkpoints]
    assert spans[0] == "Covers 2026-07-14T09:00:00+08:00 to 2026-07-14T09:02:00+08:00."
    if len(spans) > 1:
        assert spans[1] == "Covers 2026-07-14T09:00:00+08:00 to 2026-07-14T10:05:54+08:00."

    # What the summariser was sent.
    reference = json.loads(
        (FIXTURES / f"{name}.summarizer-requests.json").read_text(encoding="utf-8")
    )
    assert len(summarizer.requests) == len(reference)
    for sent, theirs_request in zip(summarizer.requests, reference, strict=True):
        assert sent.model == theirs_request["model"] == "summarizer"
        assert sent.max_tokens == theirs_request["maxTokens"] == 1024
        assert sent.session_id == theirs_request["sessionId"] == name
        assert sent.system == SUMMARIZER_SYSTEM_PROMPT
        assert len(sent.messages) == 1 and sent.messages[0]["role"] == "user"
    assert summarizer.requests[0].messages == reference[0]["messages"]
    if len(reference) > 1:
        summary = next(
            e for e in session.events if e.type == "compact/summary" and e.seq != compactions[0]
        )
        prompt = summarizer_prompt(
            render_transcript(session.events, summary.data["shadowedSeqs"])
        )
        assert summarizer.requests[1].messages[0]["content"] == [text(prompt)]

    # The request after the compaction is the checkpoint plus the retained tail.
    first = compactions[0]
    step_after = next(
        r
        for r in rig.model.requests[2:]
        if any(
            m["content"][0].get("text", "").startswith(CHECKPOINT_PREAMBLE) for m in r.messages
        )
    )
    assert (
        step_after.messages
        == Session("x", session.events[: first + 3]).derive_messages().to_list()
    )
    assert [m["role"] for m in step_after.messages] == ["user", "assistant", "user", "user"]

    final_surface = {
        "compaction-replace": (50, 42, 46, 47, 60, 64, 65, 74),
        "compaction-reconsolidate": (82, 74, 78, 79, 92, 96, 97, 106),
    }[name]
    assert session.surface == final_surface
    derived = json.loads((FIXTURES / f"{name}.derived.json").read_text(encoding="utf-8"))
    mine_derived = session.derive_messages().to_list()
    assert mine_derived[1:] == derived[1:]
    assert mine_derived[0]["content"][1:] == derived[0]["content"][1:]
    assert compaction_warnings(caplog) == []


# -- the automatic trigger ---------------------------------------------------------------------


async def test_compaction_events_provenance_and_next_request(
    clock: Clock, rigs: Rigs, caplog: pytest.LogCaptureFixture
) -> None:
    rig = await build(
        rigs, clock, config(contextWindow=300, thresholdRatio=1, retainTokens=40), tc={"timeZone": "UTC"}
    )
    rig.model.add(Reply(text="First answer " + "a" * 600), Reply(text="Second answer."))
    rig.summarizer.add(Reply(text="The user greeted; the agent answered at length."))
    await rig.say("Hello there, please answer at length.")
    clock.advance(90_000)
    await rig.say("And now?")

    turn2 = rig.turn_events(2)
    assert [e.type for e in turn2[:9]] == [
        "turn/start",
        "user/message",
        "context/message",
        "compact/start",
        "compact/summary",
        "user/message",
        "compact/end",
        "step/start",
        "assistant/chunk",
    ]
    start, summary, checkpoint, end = turn2[3:7]
    assert start.data == {"turn": 2} and end.data == {"turn": 2}
    first_user = rig.events("user/message")[0]
    shadowed = [s for s in rig.events() if s.seq < turn2[0].seq and s.surface_op == "append"]
    assert len(shadowed) == 3  # user, reading, answer; the tail is the new prompt and reading
    seqs = [e.seq for e in shadowed]
    assert list(summary.data) == [
        "summary",
        "shadowedRange",
        "shadowedSeqs",
        "shadowedTokenCount",
        "model",
        "maxTokens",
    ]
    assert summary.data["summary"] == [text("The user greeted; the agent answered at length.")]
    assert summary.data["shadowedRange"] == {"start": seqs[0], "end": seqs[-1]}
    assert summary.data["shadowedSeqs"] == seqs
    assert summary.data["shadowedTokenCount"] == sum(
        rig.compactor.estimator.event(e) for e in shadowed
    )
    assert summary.data["model"] == "summarizer" and summary.data["maxTokens"] == 1024
    assert checkpoint.surface_op == {"op": "replace", "start": seqs[0], "end": seqs[-1]}
    assert checkpoint.source_event_seqs == [start.seq, summary.seq, *seqs]
    assert checkpoint.data["source"] == SOURCE
    span = f"Covers {utc(first_user.time)} to {utc(shadowed[-1].time)}."
    assert span == "Covers 2026-07-14T01:00:00+00:00 to 2026-07-14T01:00:00+00:00."
    assert checkpoint.data["content"] == [
        text(f"{CHECKPOINT_PREAMBLE}\n\n{span}\n\n<compacted-summary>"),
        text("The user greeted; the agent answered at length."),
        text("</compacted-summary>"),
    ]
    # The raw log keeps the shadowed events; the next request is checkpoint + tail.
    assert all(e in rig.session.events for e in shadowed)
    request = rig.model.requests[-1]
    tail = turn2[1:3]
    assert rig.session.surface == (checkpoint.seq, *(e.seq for e in tail), *rig.session.surface[3:])
    assert request.messages[0] == {"role": "user", "content": checkpoint.data["content"]}
    assert request.messages[1]["content"] == [text("And now?")]
    assert request.messages[2]["content"][1]["text"].startswith(
        "Time sampled while preparing turn 2, step 1:"
    )
    sent = rig.summarizer.requests[0]
    assert sent.system == SUMMARIZER_SYSTEM_PROMPT
    assert sent.messages == [
        {
            "role": "user",
            "content": [text(summarizer_prompt(render_transcript(rig.session.events, seqs)))],
        }
    ]
    assert sent.max_tokens == 1024 and sent.session_id == "s1"
    assert compaction_warnings(caplog) == []


async def test_compaction_runs_exactly_when_the_pressure_reaches_the_threshold(
    clock: Clock, rigs: Rigs
) -> None:
    rig = await build(
        rigs,
        clock,
        config(contextWindow=700, thresholdRatio=0.5, retainTokens=40),
        tc={"timeZone": "UTC"},
    )
    for i in range(12):
        rig.model.add(Reply(text=f"Answer {i}: " + "z" * (60 + 13 * i)))
        await rig.say(f"Question {i}: " + "q" * (30 + 7 * i))
        clock.advance(61_000)
    threshold = rig.compactor.threshold
    starts = {e.data["turn"] for e in rig.events("compact/start")}
    assert starts, "expected at least one compaction"
    assert len(rig.probes) == 12
    for probe in rig.probes:
        assert (probe.turn in starts) == (probe.pressure >= threshold), probe
    assert all("error" not in e.data for e in rig.events("compact/end"))
    # Every request the model saw stayed under the threshold after its pre-step.
    for request in rig.model.requests:
        assert rig.compactor.estimator.request(request.system, [], request.messages) < threshold


@pytest.mark.parametrize(
    ("window", "ratio", "compacts"),
    [("P", 1, True), ("P+1", 1, False), ("2P+1", 0.5, True), ("2P+2", 0.5, False)],
)
async def test_threshold_edges(clock: Clock, window: str, ratio: float, compacts: bool) -> None:
    session = open_session("x" * 400, "y" * 400, "last", reply="r" * 80)
    probe_ctx, _ = await fake_rig(clock)
    pressure = probe_ctx.compact.pressure(session, SYSTEM)
    await probe_ctx.dispose()
    size = {"P": pressure, "P+1": pressure + 1, "2P+1": 2 * pressure + 1, "2P+2": 2 * pressure + 2}[
        window
    ]
    ctx, summarizer = await fake_rig(
        clock, contextWindow=size, thresholdRatio=ratio, retainTokens=0
    )
    try:
        agent = FakeAgent(session)
        await ctx.serial("agent/pre-step", agent, 1, 1, SYSTEM, [], AbortController().signal)
        assert bool([e for e in session.events if e.type == "compact/start"]) == compacts
        assert len(summarizer.requests) == (1 if compacts else 0)
    finally:
        await ctx.dispose()


@pytest.mark.parametrize("compact_first", [True, False])
async def test_the_reading_of_the_step_is_part_of_its_estimate(
    clock: Clock, rigs: Rigs, compact_first: bool
) -> None:
    # Measure: with a huge window nothing compacts; the probe sees each pre-step's pressure.
    measure = await build(
        rigs, clock, config(contextWindow=100_000, retainTokens=0), tc={"timeZone": "UTC"}
    )
    measure.model.add(Reply(text="a" * 400))
    await measure.say("first question " * 10)
    await measure.say("second")
    with_reading = measure.probes[1].pressure
    reading = measure.events("context/message")[-1]
    projected = project(reading)
    assert projected is not None
    without_reading = with_reading - measure.compactor.estimator.message(projected)
    assert measure.probes[0].pressure < without_reading < with_reading

    clock.set(T0)
    rig = await build(
        rigs,
        clock,
        config(contextWindow=with_reading, thresholdRatio=1, retainTokens=0),
        tc={"timeZone": "UTC"},
        compact_first=compact_first,
    )
    rig.model.add(Reply(text="a" * 400))
    await rig.say("first question " * 10)
    await rig.say("second")
    turn2 = rig.turn_events(2)
    assert [e.type for e in turn2[:4]] == [
        "turn/start",
        "user/message",
        "context/message",
        "compact/start",
    ]
    assert rig.probes[1].pressure == with_reading
    summary = next(e for e in turn2 if e.type == "compact/summary")
    assert turn2[2].seq not in summary.data["shadowedSeqs"]  # retained: the newest node


# -- retries -----------------------------------------------------------------------------------


async def test_retries_recompact_the_checkpoint_until_below_the_threshold(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    long_summary = "Summary: " + "s" * 1200
    # Run A: one attempt is not enough.
    session_a = open_session("x" * 3000, "tail")
    ctx, summarizer = await fake_rig(clock, contextWindow=1, thresholdRatio=1, retainTokens=0)
    summarizer.add(Reply(text=long_summary))
    await ctx.serial("agent/pre-step", FakeAgent(session_a), 1, 1, SYSTEM, [], None)
    after_one = ctx.compact.pressure(session_a, SYSTEM)
    assert compaction_warnings(caplog) == [
        f"compaction failed: compaction still above threshold after 1 compaction attempts "
        f"({after_one} estimated tokens >= threshold 1); proceeding with full history"
    ]
    assert len([e for e in session_a.events if e.type == "compact/end"]) == 1
    await ctx.dispose()
    caplog.clear()

    # Run B: the threshold is exactly that estimate, and one retry brings it under.
    session_b = open_session("x" * 3000, "tail")
    ctx, summarizer = await fake_rig(
        clock, contextWindow=after_one, thresholdRatio=1, retainTokens=0, compactionRetries=1
    )
    summarizer.add(Reply(text=long_summary), Reply(text="Short."))
    results = await ctx.compact.auto_compact(FakeAgent(session_b), SYSTEM, [], None)
    assert len(results) == 2
    first, second = results
    assert second.shadowed_seqs == (first.checkpoint_seq,)
    assert ctx.compact.pressure(session_b, SYSTEM) < after_one
    assert session_b.surface[0] == second.checkpoint_seq
    # The re-compaction's transcript shows the prior checkpoint for consolidation.
    assert (
        "<compacted-summary>\nSummary: sss"
        in summarizer.requests[1].messages[0]["content"][0]["text"]
    )
    await ctx.dispose()

    # Run C: retries exhausted.
    session_c = open_session("x" * 3000, "tail")
    ctx, summarizer = await fake_rig(
        clock, contextWindow=1, thresholdRatio=1, retainTokens=0, compactionRetries=1
    )
    summarizer.add(Reply(text=long_summary), Reply(text="Short."))
    with pytest.raises(CompactionError) as info:
        await ctx.compact.auto_compact(FakeAgent(session_c), SYSTEM, [], None)
    final = ctx.compact.pressure(session_c, SYSTEM)
    assert str(info.value) == (
        f"compaction still above threshold after 2 compaction attempts ({final} estimated tokens >= threshold 1)"
    )
    await ctx.dispose()


async def test_nothing_to_compact_is_reported_as_still_above(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    session = open_session("only node")
    ctx, summarizer = await fake_rig(clock, contextWindow=1, thresholdRatio=1)
    with pytest.raises(
        CompactionError,
        match=r"after 0 compaction attempts \(\d+ estimated tokens >= threshold 1\)",
    ):
        await ctx.compact.auto_compact(FakeAgent(session), SYSTEM, [], None)
    assert summarizer.requests == []
    assert [e.type for e in session.events] == ["turn/start", "user/message"]
    await ctx.dispose()


# -- failures ----------------------------------------------------------------------------------


FAILURES = [
    ("raises", Reply(error=LlmError("upstream exploded", "SERVER")), "upstream exploded"),
    (
        "error-finish",
        Reply(text="part", finish={"kind": "error", "message": "overloaded"}),
        "summarization failed: overloaded",
    ),
    (
        "max-tokens",
        Reply(text="part", finish={"kind": "max-tokens"}),
        "summarization stopped at the maxTokens limit (1024)",
    ),
    (
        "aborted-finish",
        Reply(text="part", finish={"kind": "aborted"}),
        "summarization aborted: the model stream was aborted",
    ),
    ("empty", Reply(text=""), "summarization returned no text"),
    ("blank", Reply(text="  \n "), "summarization returned no text"),
    ("reasoning-only", Reply(reasoning="thinking hard"), "summarization returned no text"),
    ("too-big", Reply(text="w" * 8000), "summary is not smaller than the shadowed content ("),
]


@pytest.mark.parametrize(("case", "reply", "message"), FAILURES, ids=[f[0] for f in FAILURES])
async def test_a_failed_compaction_leaves_the_full_history(
    clock: Clock,
    rigs: Rigs,
    caplog: pytest.LogCaptureFixture,
    case: str,
    reply: Reply,
    message: str,
) -> None:
    rig = await build(rigs, clock, config(contextWindow=300, thresholdRatio=1, retainTokens=0))
    rig.model.add(Reply(text="b" * 2000), Reply(text="fine"))
    rig.summarizer.add(reply)
    await rig.say("hi")
    before = rig.session.derive_messages().to_list()
    await rig.say("again")
    turn2 = rig.turn_events(2)
    assert [e.type for e in turn2[:5]] == [
        "turn/start",
        "user/message",
        "compact/start",
        "compact/end",
        "step/start",
    ]
    error = turn2[3].data["error"]
    assert turn2[3].data == {"turn": 2, "error": error}
    assert error.startswith(message) if case == "too-big" else error == message
    assert rig.session.replace_generation == 0
    assert rig.model.requests[-1].messages == [
        *before,
        {"role": "user", "content": [text("again")]},
    ]
    assert turn2[-1].data["reason"] == {"kind": "completed"}
    assert compaction_warnings(caplog) == [
        f"compaction failed: {error}; proceeding with full history"
    ]


async def test_a_missing_summarizer_adapter_fails_softly(
    clock: Clock, rigs: Rigs, caplog: pytest.LogCaptureFixture
) -> None:
    rig = await build(
        rigs,
        clock,
        config(contextWindow=300, thresholdRatio=1, retainTokens=0, summarizationModel="nobody"),
    )
    rig.model.add(Reply(text="b" * 2000), Reply(text="fine"))
    await rig.say("hi")
    await rig.say("again")
    end = rig.events("compact/end")[0]
    assert end.data == {"turn": 2, "error": 'no adapter registered for model "nobody"'}
    assert rig.turn_events(2)[-1].data["reason"] == {"kind": "completed"}
    assert len(compaction_warnings(caplog)) == 1


async def test_the_agent_model_summarises_when_no_model_is_configured(
    clock: Clock, rigs: Rigs
) -> None:
    rig = await build(
        rigs, clock, config(contextWindow=300, thresholdRatio=1, retainTokens=0, summarizationModel="")
    )
    rig.model.add(
        Reply(text="b" * 2000), Reply(text="Summary by the agent model."), Reply(text="fine")
    )
    await rig.say("hi")
    await rig.say("again")
    summary = rig.events("compact/summary")[0]
    assert summary.data["model"] == "scripted"
    assert summary.data["summary"] == [text("Summary by the agent model.")]
    assert rig.model.requests[1].system == SUMMARIZER_SYSTEM_PROMPT
    assert rig.summarizer.requests == []


async def test_abort_during_summarization(
    clock: Clock, rigs: Rigs, caplog: pytest.LogCaptureFixture
) -> None:
    rig = await build(
        rigs, clock, config(contextWindow=300, thresholdRatio=1, retainTokens=0), tc={"timeZone": "UTC"}
    )
    rig.model.add(Reply(text="b" * 2000))
    rig.summarizer.add(
        Reply(text="slow summary " * 20, deltas=200, delay=0.01)
    )  # ~2 s if not stopped
    await rig.say("hi")
    loop = asyncio.get_running_loop()

    def on_event(session: Session, event: Event) -> None:
        if event.type == "compact/start":
            loop.call_later(0.05, rig.main.cancel, "user pressed stop")

    rig.session.subscribe(on_event)
    began = loop.time()
    await rig.say("again")
    assert loop.time() - began < 1.0
    turn2 = rig.turn_events(2)
    assert [e.type for e in turn2] == [
        "turn/start",
        "user/message",
        "context/message",
        "compact/start",
        "compact/end",
        "turn/end",
    ]
    assert turn2[4].data == {"turn": 2, "error": "summarization aborted: user pressed stop"}
    assert turn2[5].data["reason"] == {"kind": "aborted", "reason": "user pressed stop"}
    assert compaction_warnings(caplog) == [
        "compaction failed: summarization aborted: user pressed stop; proceeding with full history"
    ]
    # The agent is usable afterwards; the next turn compacts normally.
    rig.summarizer.add(Reply(text="Quick."))
    await rig.say("third")
    assert rig.events("compact/end")[-1].data == {"turn": 3}


async def test_an_aborted_signal_skips_compaction(clock: Clock) -> None:
    session = open_session("x" * 1000, "tail")
    ctx, summarizer = await fake_rig(clock, contextWindow=1, thresholdRatio=1, retainTokens=0)
    controller = AbortController()
    controller.abort("gone")
    await ctx.serial("agent/pre-step", FakeAgent(session), 1, 1, SYSTEM, [], controller.signal)
    assert [e.type for e in session.events] == ["turn/start", "user/message", "user/message"]
    with pytest.raises(CompactionError, match="summarization aborted: gone"):
        await ctx.compact.compact_region(
            session, session.surface[0], session.surface[0], FakeAgent(session), controller.signal
        )
    assert [e.type for e in session.events][-2:] == ["compact/start", "compact/end"]
    assert summarizer.requests == []
    await ctx.dispose()


# -- compact_region ----------------------------------------------------------------------------


async def test_compact_region_guards(clock: Clock) -> None:
    ctx, summarizer = await fake_rig(clock, retainTokens=0)
    try:
        closed = Session("closed")
        closed.append(
            "turn/start", {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}}
        )
        closed.append(
            "user/message",
            {"content": [text("a" * 100)], "source": {"kind": "user"}},
            surface_op="append",
        )
        closed.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        with pytest.raises(CompactionError, match=r"^compactRegion: no open turn — "):
            await ctx.compact.compact_region(closed, 1, 1, FakeAgent(closed))

        session = open_session("a" * 400, "b" * 400)
        session.append(
            "assistant/message",
            {
                "turn": 1,
                "step": 1,
                "content": [{"type": "tool-call", "id": "c1", "name": "tick", "arguments": "{}"}],
            },
            surface_op="append",
        )
        session.append(
            "tool/result",
            {"turn": 1, "step": 1, "callId": "c1", "content": [text("t")], "isError": False},
            surface_op="append",
        )
        agent = FakeAgent(session)
        s = session.surface
        with pytest.raises(CompactionError, match="would separate a tool call from its result"):
            await ctx.compact.compact_region(session, s[0], s[2], agent)
        with pytest.raises(CompactionError, match="is after end seq"):
            await ctx.compact.compact_region(session, s[1], s[0], agent)
        with pytest.raises(CompactionError, match="start seq 999 is not on the surface"):
            await ctx.compact.compact_region(session, 999, s[0], agent)
        assert len(session) == 5  # nothing appended by a rejected call

        summarizer.add(Reply(text="slow", deltas=4, delay=0.05))
        asked = len(summarizer.requests)
        first = asyncio.create_task(ctx.compact.compact_region(session, s[0], s[1], agent))
        await wait_until(lambda: len(summarizer.requests) > asked)  # the first one is summarising
        with pytest.raises(CompactionError, match=r"^compaction already in progress$"):
            await ctx.compact.compact_region(session, s[0], s[1], agent)
        result = await first
        assert result.shadowed_seqs == (s[0], s[1])
        assert session.surface == (result.checkpoint_seq, s[2], s[3])
        # A pair compacted whole is fine.
        summarizer.add(Reply(text="all"))
        again = await ctx.compact.compact_region(session, result.checkpoint_seq, s[3], agent)
        assert list(session.surface) == [again.checkpoint_seq]
    finally:
        await ctx.dispose()


# -- manual compaction -------------------------------------------------------------------------


async def test_compact_now_on_an_idle_agent_runs_a_one_shot_turn(
    clock: Clock, rigs: Rigs
) -> None:
    rig = await build(rigs, clock, config(contextWindow=100_000, retainTokens=0))
    rig.model.add(Reply(text="c" * 800))
    await rig.say("question " * 100)
    flushes = rig.flushes
    shadowed = rig.session.surface[:-1]
    result = await rig.compactor.compact_now(rig.main)
    assert isinstance(result, CompactResult)
    turn2 = rig.turn_events(2)
    assert [e.type for e in turn2] == [
        "turn/start",
        "compact/start",
        "compact/summary",
        "user/message",
        "compact/end",
        "turn/end",
    ]
    assert turn2[0].data == {"turn": 2, "trigger": {"kind": "injection", "source": SOURCE}}
    assert turn2[1].data == {"turn": 2} and turn2[4].data == {"turn": 2}
    assert turn2[5].data == {"turn": 2, "reason": {"kind": "completed"}}
    assert result.shadowed_seqs == shadowed and result.turn == 2
    assert result.checkpoint_seq == turn2[3].seq
    assert rig.flushes == flushes + 1
    assert rig.main.status == "idle"
    await rig.say("next")
    assert rig.model.requests[-1].messages[0]["content"][0]["text"].startswith(CHECKPOINT_PREAMBLE)
    assert rig.turn_events(3)[0].data["turn"] == 3


async def test_compact_now_with_nothing_to_compact(clock: Clock, rigs: Rigs) -> None:
    rig = await build(rigs, clock, config(contextWindow=100_000, retainTokens=10_000))
    await rig.say("hello")
    count = len(rig.session)
    assert await rig.compactor.compact_now(rig.main) is None
    assert len(rig.session) == count


async def test_compact_now_failure_on_an_idle_agent(clock: Clock, rigs: Rigs) -> None:
    rig = await build(rigs, clock, config(contextWindow=100_000, retainTokens=0))
    rig.model.add(Reply(text="c" * 800))
    rig.summarizer.add(Reply(error=LlmError("down", "SERVER")))
    await rig.say("question")
    with pytest.raises(LlmError, match="down"):
        await rig.compactor.compact_now(rig.main)
    turn2 = rig.turn_events(2)
    assert [e.type for e in turn2] == ["turn/start", "compact/start", "compact/end", "turn/end"]
    assert turn2[2].data == {"turn": 2, "error": "down"}
    assert turn2[3].data["reason"] == {"kind": "error", "step": 0, "message": "down"}
    assert rig.session.replace_generation == 0


async def test_compact_now_from_a_pre_step_listener_compacts_in_the_turn(
    clock: Clock, rigs: Rigs
) -> None:
    rig = await build(
        rigs, clock, config(contextWindow=100_000, retainTokens=0, auto=False), tc={"timeZone": "UTC"}
    )
    results: list[CompactResult | None] = []

    async def manual(agent: Agent, turn: int, step: int, *rest: Any) -> None:
        if turn == 2:
            results.append(await rig.compactor.compact_now(agent))

    rig.ctx.on("agent/pre-step", manual)
    rig.model.add(Reply(text="c" * 800))
    await rig.say("question " * 100)
    await rig.say("follow-up")
    assert len(results) == 1 and results[0] is not None
    turn2 = rig.turn_events(2)
    assert [e.type for e in turn2[:8]] == [
        "turn/start",
        "user/message",
        "context/message",
        "compact/start",
        "compact/summary",
        "user/message",
        "compact/end",
        "step/start",
    ]
    assert rig.session.last_turn == 2


async def test_compact_now_while_running_waits_for_the_next_step(
    clock: Clock, rigs: Rigs
) -> None:
    rig = await build(rigs, clock, config(contextWindow=100_000, retainTokens=0), tc={"timeZone": "UTC"})
    pending: list[asyncio.Task[CompactResult | None]] = []

    def start_compaction(args: Any, call: Any) -> list[dict[str, Any]]:
        pending.append(asyncio.ensure_future(rig.compactor.compact_now(rig.main)))
        return [text("started")]

    rig.ctx.tools.register(
        define_tool(name="compact_later", description="", execute=start_compaction)
    )
    rig.model.add(
        Reply(text="Let me compact.", tool_calls=[("c1", "compact_later", {})]), Reply(text="done")
    )
    await rig.say("please compact " + "p" * 400)
    assert len(pending) == 1 and pending[0].done()
    result = pending[0].result()
    assert result is not None and result.turn == 1
    turn1 = rig.turn_events(1)
    types = [e.type for e in turn1]
    second_step = types.index("step/end") + 1
    assert types[second_step : second_step + 6] == [
        "context/message",
        "compact/start",
        "compact/summary",
        "user/message",
        "compact/end",
        "step/start",
    ]
    # Everything but the step-2 reading was shadowed: the tool pair stayed together.
    reading = turn1[second_step]
    assert result.shadowed_seqs == tuple(
        s
        for s in (e.seq for e in turn1)
        if s < reading.seq and rig.session.events[s].surface_op is not None
    )
    assert rig.session.surface[:2] == (result.checkpoint_seq, reading.seq)
    assert rig.session.last_turn == 1


async def test_compact_now_while_running_falls_back_to_a_one_shot_turn(
    clock: Clock, rigs: Rigs
) -> None:
    rig = await build(rigs, clock, config(contextWindow=100_000, retainTokens=0))
    rig.model.add(Reply(text="c" * 800), Reply(text="slow reply", deltas=10, delay=0.01))
    await rig.say("question " * 100)
    rig.main.send([text("second")])
    await wait_until(lambda: rig.main.status == "running")
    result = await rig.compactor.compact_now(rig.main)
    assert result is not None and result.turn == 3
    assert rig.turn_events(3)[0].data["trigger"] == {"kind": "injection", "source": SOURCE}
    assert len(rig.compactor._requests) == 0


async def test_auto_false_only_compacts_on_request(
    clock: Clock, rigs: Rigs, caplog: pytest.LogCaptureFixture
) -> None:
    rig = await build(rigs, clock, config(contextWindow=1, thresholdRatio=1, retainTokens=0, auto=False))
    rig.model.add(Reply(text="c" * 800))
    await rig.say("question " * 100)
    await rig.say("more")
    assert rig.events("compact/start") == []
    assert await rig.compactor.compact_now(rig.main) is not None
    assert len(rig.events("compact/start")) == 1
    assert compaction_warnings(caplog) == []


async def test_disposing_the_plugin_removes_listener_and_service(clock: Clock, rigs: Rigs) -> None:
    ctx = (await rigs.make(models=())).ctx
    listeners = ctx.listeners("agent/pre-step")
    fiber = await ctx.plugin(compact, config())
    assert ctx.listeners("agent/pre-step") == listeners + 1
    assert isinstance(ctx.compact, Compactor)
    await fiber.dispose()
    assert ctx.listeners("agent/pre-step") == listeners
    assert ctx.get("compact") is None


# -- broken tool pairs in a real log -----------------------------------------------------------


async def test_an_aborted_tool_call_does_not_block_later_compaction(
    clock: Clock, rigs: Rigs
) -> None:
    rig = await build(rigs, clock, config(contextWindow=100_000, retainTokens=0))

    def cancel_on_call(session: Session, event: Event) -> None:
        if event.type == "assistant/message" and event.data["turn"] == 1:
            rig.main.cancel("stop")

    unsubscribe = rig.session.subscribe(cancel_on_call)
    rig.model.add(Reply(text="Calling.", tool_calls=[("lost", "tick", {"ms": 1})]))
    await rig.say("start " * 40)
    unsubscribe()
    assert rig.turn_events(1)[-1].data["reason"] == {"kind": "aborted", "reason": "stop"}
    assert rig.events("tool/call") == []
    rig.model.add(Reply(text="Back again " * 30))
    await rig.say("hello again " * 30)
    surface = rig.session.surface
    depths = tool_pairing_depths(rig.session.events, surface)
    assert depths[-1] == 1  # the reference's count never balances again
    result = await rig.compactor.compact_now(rig.main)
    assert result is not None
    assert result.shadowed_seqs == surface[:-1]


# -- time survives compaction ------------------------------------------------------------------


class MemoryStore:
    """Enough of ``session_store`` for ``agent_loop.resume``."""

    def __init__(self, session_id: str, events: Sequence[Event], header: dict[str, Any]) -> None:
        self._stored = {session_id: (list(events), header)}

    async def load(self, session_id: str) -> StoredSession:
        events, header = self._stored[session_id]
        return StoredSession(header, events)

    async def release(self, session_id: str) -> None:
        return None


def reading_texts(events: Sequence[Event]) -> list[str]:
    return [e.data["content"][0]["text"] for e in events if time_context.is_reading(e)]


async def test_shadowed_readings_still_drive_time_context_across_a_resume(
    clock: Clock, rigs: Rigs
) -> None:
    tc = {"timeZone": "UTC", "refreshIntervalMs": 60_000}
    rig = await build(rigs, clock, config(contextWindow=100_000, retainTokens=0, auto=False), tc=tc)

    async def compact_at_step_2(agent: Agent, turn: int, step: int, *rest: Any) -> None:
        if turn == 1 and step == 2:
            await rig.compactor.compact_now(agent)

    rig.ctx.on("agent/pre-step", compact_at_step_2)
    rig.model.add(
        Reply(text="Waiting.", tool_calls=[("t1", "tick", {"ms": 10_000})]),
        Reply(text="Waiting more.", tool_calls=[("t2", "tick", {"ms": 55_000})]),
        Reply(text="done"),
    )
    await rig.say("Schedule the report for 2026-07-15 09:00, deadline Friday. " * 10)
    readings = [e for e in rig.session.events if time_context.is_reading(e)]
    first, third = readings
    assert first.time == T0 and third.time == T0 + 65_000
    # Step 2 had no reading (interval); its compaction shadowed the step-1 reading ...
    checkpoint = rig.events("compact/summary")[0]
    assert first.seq in checkpoint.data["shadowedSeqs"]
    assert first.seq not in rig.session.surface
    # ... which still served as the baseline of step 3.
    assert third.data["content"][0]["text"] == (
        f"Time sampled while preparing turn 1, step 3: {utc(T0 + 65_000)}[UTC]\n"
        "Elapsed since the preceding step context: 1m 5s."
    )
    # Shadow the step-3 reading too, with the agent idle.
    assert await rig.compactor.compact_now(rig.main) is not None
    assert third.seq not in rig.session.surface
    events = list(rig.session.events)
    header = dict(rig.session.header)
    await rig.ctx.dispose()

    # Resume in a fresh process: the shadowed reading is 30 s old, so no reading.
    clock.advance(30_000)
    resumed = await rigs.make(
        default=Reply(text="ok"),
        loop_config={"devChecks": True},
        plugins=[(compact, config(contextWindow=100_000, retainTokens=0, auto=False)), (time_context, tc)],
        clock=clock,
    )
    ctx, model = resumed.ctx, resumed.model
    ctx.provide("session_store", MemoryStore("s1", events, header))
    agent = await ctx.agent_loop.resume("main", "s1", model="scripted")
    agent.send([text("still there?")])
    await agent.when_idle()
    assert reading_texts(agent.session.events) == reading_texts(events)
    clock.advance(40_000)
    agent.send([text("and now?")])
    await agent.when_idle()
    texts = reading_texts(agent.session.events)
    assert len(texts) == 3
    assert texts[-1] == (
        f"Time sampled while preparing turn 4, step 1: {utc(T0 + 135_000)}[UTC]\n"
        "Elapsed since the preceding model-visible message: 0s."
    )
    # The model sees only the unshadowed reading.
    visible = [m for m in model.requests[-1].messages if "Time sampled" in json.dumps(m)]
    assert len(visible) == 1
    assert (
        Session("x", list(agent.session.events)).derive_messages()
        == agent.session.derive_messages()
    )


async def test_the_checkpoint_span_uses_the_time_context_zone(
    clock: Clock, rigs: Rigs
) -> None:
    rig = await build(
        rigs, clock, config(contextWindow=100_000, retainTokens=0), tc={"timeZone": "Asia/Shanghai"}
    )
    rig.model.add(Reply(text="c" * 800))
    await rig.say("question " * 100)
    clock.advance(2 * 3600_000 + 42 * 60_000 + 10_000)
    await rig.say("later")
    result = await rig.compactor.compact_now(rig.main)
    assert result is not None
    checkpoint = rig.session.events[result.checkpoint_seq]
    assert checkpoint.data["content"][0]["text"].split("\n\n")[1] == (
        "Covers 2026-07-14T09:00:00+08:00 to 2026-07-14T11:42:10+08:00."
    )


async def test_a_waiting_compact_now_can_be_abandoned(clock: Clock, rigs: Rigs) -> None:
    rig = await build(rigs, clock, config(contextWindow=100_000, retainTokens=0))
    rig.model.add(
        Reply(text="c" * 800),
        Reply(text="slow", tool_calls=[("t1", "tick", {"ms": 1})], deltas=4, delay=0.02),
        Reply(text="done"),
    )
    await rig.say("question " * 100)
    rig.main.send([text("second")])
    await wait_until(lambda: rig.main.status == "running")
    # A caller whose signal aborts gets an error; one that is cancelled just goes away.
    controller = AbortController()
    aborted = asyncio.create_task(rig.compactor.compact_now(rig.main, controller.signal))
    cancelled = asyncio.create_task(rig.compactor.compact_now(rig.main))
    await asyncio.sleep(0)
    controller.abort("never mind")
    cancelled.cancel()
    with pytest.raises(CompactionError, match=r"^compaction aborted: never mind$"):
        await aborted
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert len(rig.compactor._requests) == 0
    await rig.main.when_idle()
    assert rig.events("compact/start") == []


async def test_the_deepseek_estimator_counts_real_tokens(clock: Clock) -> None:
    session = open_session("The quarterly report is due on 2026-09-30 at 17:00 CET. " * 20, "tail")
    ctx, _ = await fake_rig(clock, retainTokens=0, estimator="deepseek")
    try:
        counter = compact.DeepSeekCounter()
        first = session.events[session.surface[0]]
        expected = counter.count(first.data["content"][0]["text"]) + 4
        result = await ctx.compact.compact_now(FakeAgent(session))
        assert result is not None
        assert result.shadowed_token_count == expected
        assert ctx.compact.pressure(session, SYSTEM) == (
            sum(ctx.compact.estimator.message(m) for m in session.derive_messages())
            + counter.count(SYSTEM)
        )
    finally:
        await ctx.dispose()
