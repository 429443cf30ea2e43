"""Terminal mode's rendering without a terminal: block splitting, Markdown, usage and errors."""

from __future__ import annotations

from dsh.apps.term.markdown import BlockSplitter, render_markdown
from dsh.apps.term.view import Style, TranscriptView, ending_text, usage_line
from dsh.session import Event


def test_blocks_end_at_blank_lines_outside_fences_only() -> None:
    splitter = BlockSplitter()
    text = "Intro **bold**.\n\n```py\ndef f():\n\n    return 1\n```\nTail"
    blocks = [b for ch in text for b in splitter.feed(ch)]
    assert blocks == ["Intro **bold**.\n", "```py\ndef f():\n\n    return 1\n```\n"]
    assert splitter.pending == "Tail"
    assert splitter.flush() == "Tail" and splitter.pending == ""


def test_markdown_keeps_angle_brackets_and_drops_markup() -> None:
    out = render_markdown('Try "echo <something>" and **this**.', width=80, colour=False)
    assert 'Try "echo <something>" and this.' in out


def _view() -> tuple[TranscriptView, list[str]]:
    out: list[str] = []
    return TranscriptView(out.append, Style(False), lambda: 80), out


def test_a_cut_reply_and_its_error_are_separate_lines() -> None:
    view, out = _view()
    view(Event("turn/start", 0, 0, {"turn": 1}))
    view(Event("assistant/chunk", 1, 0, {"chunk": {"type": "text-delta", "text": "cut in the mid"}}))
    assert view.live == "cut in the mid" and out == []
    view(Event("turn/end", 2, 0, {"turn": 1, "reason": {"kind": "error", "step": 1, "message": "stream cut", "code": "STREAM"}}))
    text = "".join(out)
    assert text.startswith("cut in the mid\n")
    assert text.count("⊘") == 1 and "⊘ turn error: STREAM: stream cut" in text


def test_usage_line_sums_the_turns_logged_usage() -> None:
    usages = [{"inputTokens": 20, "outputTokens": 10, "cacheReadTokens": 100}, {"inputTokens": 5, "outputTokens": 1}]
    assert usage_line("m", 3, usages, 1.25) == "m · turn 3 · 25 in · 11 out · 100 cached · 1.2s"
    assert ending_text({"kind": "completed"}) is None
    assert ending_text({"kind": "aborted", "reason": "interrupted by the user"}) == "⊘ turn aborted: interrupted by the user"
