"""What terminal mode prints for session events: finished lines only, written above the input.

:class:`TranscriptView` turns the live session's events into finished, styled lines (Markdown
blocks once complete, reasoning dim, tool calls and results, the time readings the model was
told, a delivered reminder, the todo checklist, one line per failed or cancelled turn, and a dim
per-turn line with the model, tokens and cache hits from the logged usage). The unfinished tail of the reply is exposed as
:attr:`TranscriptView.live` for the live area. :func:`replay` renders the last turns of a stored
conversation the same way, for ``--resume``/``--continue`` and ``/resume``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from dsh.apps.escape import escape_controls
from dsh.apps.term.markdown import BlockSplitter, render_markdown
from dsh.observability.cost import format_usd, prewarm, usage_cost
from dsh.plugins.schedule.delivery import describe as describe_reminder
from dsh.session import Event
from dsh.tools.workspace.todo import render_checklist

DIM, BOLD, RED, CYAN, RESET = "\x1b[2m", "\x1b[1m", "\x1b[31m", "\x1b[36m", "\x1b[0m"


def _text(blocks: Any) -> str:
    return "".join(b.get("text", "") for b in blocks or () if isinstance(b, dict) and b.get("type") == "text")


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(1, limit - 1)] + "…"


class Style:
    """ANSI styling that disappears with ``NO_COLOR`` (bold and dim stay: they are not colour)."""

    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def dim(self, text: str) -> str:
        return f"{DIM}{text}{RESET}"

    def bold(self, text: str) -> str:
        return f"{BOLD}{text}{RESET}"

    def red(self, text: str) -> str:
        return f"{RED}{text}{RESET}" if self.colour else f"{BOLD}{text}{RESET}"

    def cyan(self, text: str) -> str:
        return f"{CYAN}{text}{RESET}" if self.colour else f"{BOLD}{text}{RESET}"


def usage_line(
    model: str | None, turn: Any, usages: Sequence[dict[str, Any]], seconds: float | None, cost: Decimal | None = None
) -> str:
    """``mock-echo · turn 2 · 20 in · 31 out · 0 cached · 1.4s`` from the turn's logged usage.

    ``in`` is the uncached input (usage is disjoint); with cache hits the share of all input
    served from the cache follows: ``900 cached (82% of input)``, where all input is uncached +
    cache reads + cache writes, as every provider bills it. `` · $0.0012`` comes before the time when
    the price table knows the model.
    """
    tokens_in = sum(int(u.get("inputTokens") or 0) for u in usages)
    tokens_out = sum(int(u.get("outputTokens") or 0) for u in usages)
    cached = sum(int(u.get("cacheReadTokens") or 0) for u in usages)
    written = sum(int(u.get("cacheWriteTokens") or 0) for u in usages)
    total = tokens_in + cached + written
    hits = f"{cached} cached ({cached * 100 // total}% of input)" if cached and total else f"{cached} cached"
    parts = [model or "?", f"turn {turn}", f"{tokens_in} in", f"{tokens_out} out", hits]
    if cost is not None:
        parts.append(format_usd(cost))
    if seconds is not None:
        parts.append(f"{seconds:.1f}s")
    return " · ".join(parts)


def changes_line(changes: Any) -> str | None:
    """``3 files changed, +12 −4 · /rewind to undo`` from a turn-end snapshot's ``changes``."""
    if not isinstance(changes, dict) or not changes.get("files"):
        return None
    files = changes["files"]
    return (f"{files} file{'s' if files != 1 else ''} changed, +{changes.get('added', 0)} "
            f"−{changes.get('deleted', 0)} · /rewind to undo")


def header_model(event: Event) -> str | None:
    header = event.data.get("header") if isinstance(event.data, dict) else None
    config = header.get("config") if isinstance(header, dict) else None
    model = config.get("model") if isinstance(config, dict) else None
    return model if isinstance(model, str) else None


def reminder_text(event: Event) -> str | None:
    """``⏰ reminder schedule-1 · <when> · <prompt>`` for a delivered reminder's framing prompt."""
    data = event.data if isinstance(event.data, dict) else {}
    source = data.get("source")
    if not (isinstance(source, dict) and source.get("kind") == "plugin" and source.get("plugin") == "tool-schedule"):
        return None
    text = _text(data.get("content"))
    return escape_controls("⏰ reminder " + (describe_reminder(text) or " ".join(text.split())))


def ending_text(reason: dict[str, Any]) -> str | None:
    """One line for a turn that did not complete, else ``None``."""
    kind = reason.get("kind")
    if kind not in ("aborted", "error", "disposed", "rejected", "interrupted"):
        return None
    detail = reason.get("reason") or reason.get("message") or ""
    code = reason.get("code")
    if kind == "error" and code:
        detail = f"{code}: {detail}"
    return escape_controls(f"⊘ turn {kind}{': ' + str(detail) if detail else ''}")


class TranscriptView:
    """Session events in, finished output lines out (through ``emit``)."""

    def __init__(self, emit: Callable[[str], None], style: Style, width: Callable[[], int]) -> None:
        self._emit = emit
        self.style = style
        self._width = width
        self._blocks = BlockSplitter()
        self._reasoning = ""
        self.model: str | None = None
        self._usages: list[dict[str, Any]] = []
        self._calls: list[tuple[str, dict[str, Any], int | None]] = []  # priced at turn end
        self._started: float | None = None
        self.waiting = False  # a step started and no token came yet
        self.waiting_since = 0.0
        self.streaming = False
        self._blocks_shown = 0  # Markdown blocks of the current reply already printed
        prewarm()  # the price table loads off the UI thread, before the first turn ends
        self._changes: str | None = None  # the turn's workspace summary (rewind plugin)
        # Running subagents, by the parent's call id: (name, current tool, started).
        self.children: dict[str, tuple[str, str, float]] = {}

    @property
    def live(self) -> str:
        """The unfinished tail (reasoning or reply) for the live area."""
        if self._reasoning:
            return self._reasoning
        return self._blocks.pending

    @property
    def live_is_reasoning(self) -> bool:
        return bool(self._reasoning)

    def line(self, text: str) -> None:
        self._emit(text + "\n")

    def markdown(self, text: str) -> None:
        rendered = render_markdown(escape_controls(text), width=self._width(), colour=self.style.colour)
        lines = [line.rstrip(" ") for line in rendered.rstrip("\n").split("\n")]
        self._emit("\n".join(lines) + "\n")

    def child(self, call_id: str, label: str, what: str, started: float, done: bool) -> None:
        """A subagent's progress: shown live under its call, one dim line once it is done."""
        if not done:
            self.children[call_id] = (label, what, started)
            return
        self.children.pop(call_id, None)
        self.line(self.style.dim(escape_controls(f"  ⤷ {label} · {what} · {int(time.monotonic() - started)}s")))

    def children_status(self) -> str:
        now = time.monotonic()
        return " · ".join(
            escape_controls(f"⤷ {label} · {what} · {int(now - started)}s") for label, what, started in self.children.values()
        )

    # -- events ------------------------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        kind, data = event.type, event.data
        if kind == "request/header":
            self.model = header_model(event) or self.model
        elif kind == "turn/start":
            self._usages, self._calls, self._started = [], [], time.monotonic()
        elif kind == "step/start":
            self.waiting, self.waiting_since = True, time.monotonic()
        elif kind == "assistant/chunk":
            self._chunk(data.get("chunk") or {})
        elif kind == "assistant/message":
            self._end_text()
            usage = data.get("usage")
            if isinstance(usage, dict):
                self._usages.append(usage)
                self._calls.append((self.model or "", usage, event.time))
        elif kind == "tool/call":
            self._end_text()
            args = escape_controls(str(data.get("arguments") or ""))
            name = escape_controls(str(data.get("name")))
            self.line(self.style.cyan(f"  ⚙ {name}") + _one_line(f"({args})", self._width() - len(name) - 6))
        elif kind == "tool/result":
            text = escape_controls(_text(data.get("content")))
            shown = _one_line(text, self._width() - 6) or "(no output)"
            more = text.count("\n")
            suffix = f" (+{more} lines)" if more else ""
            styled = self.style.red(f"  ↳ {shown}") if data.get("isError") else self.style.dim(f"  ↳ {shown}{suffix}")
            self.line(styled)
        elif kind == "context/message":
            self._context(data)
        elif kind == "user/message":
            reminder = reminder_text(event)
            if reminder is not None:  # a turn nobody typed: say why it runs, before its reply
                self.line(self.style.dim(reminder))
        elif kind == "todo/write":
            self._todo(data.get("todos"))
        elif kind == "workspace/snapshot":
            self._changes = changes_line(data.get("changes"))
        elif kind == "step/end":
            self.waiting = self.streaming = False
        elif kind == "turn/end":
            self._end_text()
            self.waiting = self.streaming = False
            reason = data.get("reason") if isinstance(data.get("reason"), dict) else {}
            ending = ending_text(reason)
            if ending is not None:
                self.line(self.style.red(ending))
            seconds = time.monotonic() - self._started if self._started is not None else None
            if self._usages or ending is None:
                cost = usage_cost(self._calls)
                self.line(self.style.dim(usage_line(self.model, data.get("turn"), self._usages, seconds, cost)))
            if self._changes:
                self.line(self.style.dim(self._changes))
            self._started = self._changes = None

    def _chunk(self, chunk: dict[str, Any]) -> None:
        ctype = chunk.get("type")
        if ctype == "text-delta":
            self._first_token()
            if self._reasoning:
                self._end_reasoning()
            for block in self._blocks.feed(str(chunk.get("text", ""))):
                self._reply_block(block)
        elif ctype == "reasoning-delta":
            self._first_token()
            self._reasoning += str(chunk.get("text", ""))
            while "\n" in self._reasoning:
                line, self._reasoning = self._reasoning.split("\n", 1)
                self.line(self.style.dim(escape_controls(line)))

    def _first_token(self) -> None:
        self.waiting = False
        self.streaming = True

    def _end_reasoning(self) -> None:
        if self._reasoning:
            self.line(self.style.dim(escape_controls(self._reasoning)))
            self._reasoning = ""

    def _end_text(self) -> None:
        self._end_reasoning()
        rest = self._blocks.flush()
        if rest is not None:
            self._reply_block(rest)
        self._blocks_shown = 0

    def _reply_block(self, block: str) -> None:
        if self._blocks_shown:
            self._emit("\n")  # paragraphs stay apart, as in the Markdown
        self._blocks_shown += 1
        self.markdown(block)

    def _todo(self, todos: Any) -> None:
        self.line(self.style.cyan("  ☑ todo"))
        for item in render_checklist(todos).splitlines():
            self.line("    " + escape_controls(item))

    def _context(self, data: dict[str, Any]) -> None:
        source = data.get("source") or {}
        plugin = source.get("plugin") if isinstance(source, dict) else None
        text = escape_controls(_text(data.get("content")))
        if plugin == "time-context":
            self.line(self.style.dim("⏱ " + text.replace("\n", " · ")))
        elif plugin == "turn-outcome":
            self.line(self.style.dim("ℹ told the model: " + _one_line(text, self._width() - 20)))


def _user_text(event: Event) -> str | None:
    source = event.data.get("source") if isinstance(event.data, dict) else None
    if isinstance(source, dict) and source.get("kind") not in (None, "user"):
        return None
    return _text(event.data.get("content"))


def replay(events: Sequence[Event], view: TranscriptView, *, turns: int = 3) -> int:
    """Render the last ``turns`` turns of a stored conversation; returns how many turns it has."""
    starts = [i for i, e in enumerate(events) if e.type == "turn/start"]
    model = None
    for event in events:
        if event.type == "request/header":
            model = header_model(event) or model
    view.model = model
    total = len(starts)
    shown = starts[-turns:] if starts else []
    if not shown:
        return total
    style = view.style
    view.line(style.dim(f"── {total} earlier turn{'s' if total != 1 else ''}; the last {len(shown)}: ──"))
    for event in events[shown[0]:]:
        kind = event.type
        if kind == "user/message":
            text = _user_text(event)
            reminder = reminder_text(event)
            if text:
                view.line(style.bold("> " + escape_controls(text)))
            elif reminder is not None:
                view.line(style.dim(reminder))
        elif kind == "steering/message":
            view.line(style.dim("↪ " + escape_controls(_text(event.data.get("content")))))
        elif kind == "assistant/message":
            for block in event.data.get("content") or ():
                if block.get("type") == "text" and block.get("text", "").strip():
                    view.markdown(str(block["text"]))
                elif block.get("type") == "tool-call":
                    view(Event("tool/call", event.seq, event.time, {
                        "name": block.get("name"), "arguments": block.get("arguments"),
                    }))
        elif kind == "tool/result":
            view(event)
        elif kind == "turn/end":
            reason = event.data.get("reason") if isinstance(event.data.get("reason"), dict) else {}
            ending = ending_text(reason)
            if ending is not None:
                view.line(style.red(ending))
    view.line(style.dim("──"))
    return total
