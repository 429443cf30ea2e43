"""Streaming Markdown for terminal mode: split a growing reply into finished blocks, render each once.

A block is finished at a blank line outside a code fence, or at the fence that closes a code
block. Each finished block is rendered by rich (headings, lists, emphasis, code highlighted by
Pygments) exactly once and printed above the input line; history is never redrawn. The unfinished
tail is shown raw in the live area until its block ends.
"""

from __future__ import annotations

import io

from markdown_it import MarkdownIt
from rich.console import Console
from rich.markdown import Markdown

CODE_THEME = "monokai"


def _fence(line: str) -> str | None:
    stripped = line.lstrip()
    for marker in ("```", "~~~"):
        if stripped.startswith(marker):
            return marker
    return None


class BlockSplitter:
    """Feeds text deltas, returns the Markdown blocks they finished."""

    def __init__(self) -> None:
        self._done_lines: list[str] = []  # complete lines of the block in progress
        self._partial = ""  # the line being streamed
        self._fence: str | None = None

    @property
    def pending(self) -> str:
        """The unfinished block, as streamed so far."""
        return "".join(self._done_lines) + self._partial

    def feed(self, text: str) -> list[str]:
        blocks: list[str] = []
        self._partial += text
        while "\n" in self._partial:
            line, self._partial = self._partial.split("\n", 1)
            block = self._line(line + "\n")
            if block is not None:
                blocks.append(block)
        return blocks

    def flush(self) -> str | None:
        """The rest, as one block (end of the message, or a tool call interrupting it)."""
        text = self.pending
        self._done_lines, self._partial, self._fence = [], "", None
        return text if text.strip() else None

    def _line(self, line: str) -> str | None:
        marker = _fence(line)
        if self._fence is not None:
            self._done_lines.append(line)
            if marker == self._fence and line.strip() == marker:
                self._fence = None
                return self._take()
            return None
        if marker is not None:
            self._fence = marker
            self._done_lines.append(line)
            return None
        if not line.strip():
            return self._take() if any(x.strip() for x in self._done_lines) else None
        self._done_lines.append(line)
        return None

    def _take(self) -> str | None:
        text = "".join(self._done_lines)
        self._done_lines = []
        return text if text.strip() else None


class _Markdown(Markdown):
    """rich's Markdown with raw HTML read as text: rich drops HTML, so ``echo <text>`` in a reply
    would lose ``<text>``."""

    def __init__(self, markup: str) -> None:
        super().__init__(markup, code_theme=CODE_THEME, hyperlinks=False)
        parser = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table")
        self.parsed = parser.parse(markup)


def render_markdown(text: str, *, width: int, colour: bool) -> str:
    """``text`` as rich renders Markdown, ANSI-styled (no colour when ``colour`` is false)."""
    out = io.StringIO()
    console = Console(
        file=out,
        width=max(20, width),
        force_terminal=True,
        color_system="truecolor" if colour else None,
        no_color=not colour,
        highlight=False,
        emoji=False,
    )
    console.print(_Markdown(text))
    return out.getvalue()
