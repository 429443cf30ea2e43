"""The span derivation itself, on real logs: every prefix of every fixture log (the reference
harness's, cut anywhere, as a crash or a live session leaves it) derives well-formed spans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsh.observability.spans import SessionTracer, SpanData

FIXTURES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "dsh-v0").glob("*.jsonl"))


class Recorder:
    def __init__(self) -> None:
        self.started: list[SpanData] = []
        self.ended: list[SpanData] = []

    def start(self, span: SpanData) -> None:
        assert span.parent is None or (span.parent in self.started and span.parent not in self.ended)
        self.started.append(span)

    def end(self, span: SpanData) -> None:
        assert span in self.started and span not in self.ended
        assert span.end_ms is not None and span.end_ms >= span.start_ms
        self.ended.append(span)


def events_of(path: Path) -> list[dict[str, object]]:
    lines = path.read_text().splitlines()[1:]
    return [json.loads(line) for line in lines if line.strip().endswith("}")]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_every_prefix_of_a_log_derives_balanced_spans(path: Path) -> None:
    events = [e for e in events_of(path) if isinstance(e.get("data"), dict)]
    assert events
    for cut in range(len(events) + 1):
        sink = Recorder()
        tracer = SessionTracer(path.stem, sink)
        for event in events[:cut]:
            tracer.feed(str(event["type"]), int(event["time"]), event["data"])  # type: ignore[arg-type]
        tracer.close()
        assert len(sink.started) == len(sink.ended)
        # A child never outlives its parent.
        for span in sink.ended:
            if span.parent is not None:
                assert span.parent.end_ms is not None and span.end_ms is not None
                assert span.start_ms >= span.parent.start_ms and span.end_ms <= span.parent.end_ms
        complete = sum(1 for e in events[:cut] if e["type"] == "turn/end")
        turns = [s for s in sink.ended if s.name.startswith("invoke_agent")]
        assert len([s for s in turns if "dsh.incomplete" not in s.attributes]) == complete


def test_a_reading_lands_on_the_step_it_was_taken_for() -> None:
    sink = Recorder()
    tracer = SessionTracer("main-session-x", sink)
    reading = "Time sampled while preparing turn 1, step 1: 2026-07-14T09:00:00+08:00[Asia/Shanghai]\nElapsed since the preceding model-visible message: 1h 2m 3s."
    tracer.feed("turn/start", 10, {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}})
    tracer.feed("context/message", 11, {"content": [{"type": "text", "text": reading}], "source": {"kind": "plugin", "plugin": "time-context"}})
    tracer.feed("step/start", 12, {"turn": 1, "step": 1})
    tracer.feed("request/header", 12, {"header": {"config": {"model": "gpt-4o"}}})
    tracer.feed("assistant/message", 20, {"turn": 1, "step": 1, "content": [], "usage": {"inputTokens": 1, "outputTokens": 1}})
    tracer.feed("turn/end", 21, {"turn": 1, "reason": {"kind": "error", "step": 1, "message": "boom", "code": "TIMEOUT"}})
    turn, chat = sink.started
    assert chat.name == "chat gpt-4o" and chat.attributes["gen_ai.provider.name"] == "openai"
    [event] = chat.events
    assert (event.name, event.time_ms) == ("dsh.time_context.reading", 11)
    assert event.attributes == {
        "dsh.time.sampled": "2026-07-14T09:00:00+08:00",
        "dsh.time.zone": "Asia/Shanghai",
        "dsh.time.elapsed": "1h 2m 3s",
        "dsh.time.elapsed_since": "preceding model-visible message",
    }
    assert turn.error == "boom" and turn.attributes["error.type"] == "TIMEOUT"
    assert (turn.start_ms, turn.end_ms, chat.start_ms, chat.end_ms) == (10, 21, 12, 20)
