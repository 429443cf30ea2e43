"""Spans derived from durable log events: the one mapping that live tracing and replay share.

:class:`SessionTracer` is fed a session's events in log order (``feed(type, time, data)``) and
tells a :class:`SpanSink` when each span opens and closes, with the log's own timestamps. The
live ``telemetry`` plugin feeds it from ``session/event`` as each event is appended; ``dsh
sessions trace`` feeds it from a stored log. Because both read nothing but the events, a
session's live and replayed traces match span for span (only the ids differ).

Nothing here imports OpenTelemetry: the sink (:mod:`dsh.observability.otel`) does. The mapping
to the GenAI semantic conventions is tabled in this package's README.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dsh.observability.cost import call_cost_usd, provider_of

__all__ = ["AttrValue", "SessionTracer", "SpanData", "SpanEvent", "SpanSink", "agent_name_of"]

AttrValue = str | int | float | bool | Sequence[str]

# time-context's reading: "Time sampled while preparing turn 1, step 2: <iso>[<zone>]\n", with
# zoneLine on "Browser time zone for this request: <zone, mixed [...] or unavailable>. …\n", then
# "Elapsed since …: 0s."
_READING = re.compile(
    r"Time sampled while preparing turn \d+, step \d+: (\S+?)\[([^\]]+)\]\s*\n"
    r"(?:Browser time zone for this request: (.+?)\. [^\n]*\n)?"
    r"(Elapsed since [^:]+): (.+?)\.?\s*$"
)
_ENDED_BADLY = frozenset({"error", "aborted", "rejected", "disposed", "interrupted"})


@dataclass(slots=True)
class SpanEvent:
    name: str
    time_ms: int
    attributes: dict[str, AttrValue] = field(default_factory=dict)


@dataclass(slots=True)
class SpanData:
    """One span: opened by an event, closed by a later one. ``handle`` is the sink's own."""

    name: str
    kind: str  # "internal" | "client"
    start_ms: int
    parent: SpanData | None
    attributes: dict[str, AttrValue] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    end_ms: int | None = None
    error: str | None = None  # the status description when the span failed
    handle: object = None


class SpanSink(Protocol):
    def start(self, span: SpanData) -> None: ...

    def end(self, span: SpanData) -> None: ...


def agent_name_of(session_id: str) -> str:
    """The agent a session belongs to, from its id (``main-session-…`` → ``main``)."""
    head, sep, _ = session_id.partition("-session-")
    return head if sep and head else "dsh"


def _text(content: object) -> str:
    if not isinstance(content, list):
        return ""
    return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")


class SessionTracer:
    """The span state of one session (see the module docstring)."""

    def __init__(
        self,
        session_id: str,
        sink: SpanSink,
        *,
        parent: SpanData | None = None,
        capture_content: bool = False,
    ) -> None:
        self.session_id = session_id
        self.agent = agent_name_of(session_id)
        self.sink = sink
        self.parent = parent
        self.capture_content = capture_content
        self.model: str | None = None
        self.turn: SpanData | None = None
        self.chat: SpanData | None = None
        self.tools: dict[str, SpanData] = {}
        self.approvals: dict[str, SpanData] = {}
        self.compaction: SpanData | None = None
        self.pending: list[SpanEvent] = []  # readings taken before their step's step/start
        self.turn_costs: list[float | None] = []
        self.last_ms = 0
        # Per model call, for the metrics: (model, provider, usage, seconds, cost).
        self.calls: list[tuple[str, str, Mapping[str, int], float, float | None]] = []

    # -- the innermost open span, where a child session's spans hang -----------------------
    def innermost(self) -> SpanData | None:
        if self.tools:
            return next(reversed(self.tools.values()))
        return self.turn or self.parent

    # -- feeding -----------------------------------------------------------------------------
    def feed(self, type_: str, time_ms: int, data: Mapping[str, object]) -> None:
        self.last_ms = max(self.last_ms, time_ms)
        handler = _HANDLERS.get(type_)
        if handler is not None:
            handler(self, time_ms, data)

    def close(self, time_ms: int | None = None, *, turn_ended: bool = False) -> None:
        """End whatever is still open (a live session disposed mid-turn, a log cut short);
        ``turn_ended``: the turn itself ended in the log, only what it held is incomplete."""
        at = self.last_ms if time_ms is None else time_ms
        for span in [*self.approvals.values(), *self.tools.values()]:
            span.attributes["dsh.incomplete"] = True
            self._end(span, at)
        self.approvals.clear()
        self.tools.clear()
        for open_span in (self.chat, self.compaction, self.turn):
            if open_span is not None:
                ended_in_log = turn_ended and open_span is self.turn
                step_ended = open_span is self.chat and open_span.end_ms is not None
                if not (ended_in_log or step_ended):
                    open_span.attributes["dsh.incomplete"] = True
                self._end(open_span, at)
        self.chat = self.compaction = self.turn = None

    # -- helpers -----------------------------------------------------------------------------
    def _open(self, name: str, kind: str, at: int, parent: SpanData | None, attrs: dict[str, AttrValue]) -> SpanData:
        span = SpanData(name, kind, at, parent, attrs)
        self.sink.start(span)
        return span

    def _end(self, span: SpanData, at: int) -> None:
        if span is self.chat and span.end_ms is not None:  # closed by its step/end already
            at = min(at, span.end_ms)
        span.end_ms = max(at, span.start_ms)
        self.sink.end(span)

    def _base(self, operation: str) -> dict[str, AttrValue]:
        return {"gen_ai.operation.name": operation, "gen_ai.conversation.id": self.session_id}

    # -- events ------------------------------------------------------------------------------
    def _turn_start(self, at: int, data: Mapping[str, object]) -> None:
        if self.turn is not None:
            self.close(at)
        attrs = self._base("invoke_agent")
        attrs["gen_ai.agent.name"] = self.agent
        turn = data.get("turn")
        if isinstance(turn, int):
            attrs["dsh.turn"] = turn
        trigger = data.get("trigger")
        if isinstance(trigger, dict) and isinstance(trigger.get("source"), dict):
            attrs["dsh.trigger.source"] = str(trigger["source"].get("kind", ""))
        self.turn = self._open(f"invoke_agent {self.agent}", "internal", at, self.parent, attrs)
        self.turn_costs = []

    def _user_message(self, at: int, data: Mapping[str, object]) -> None:
        source = data.get("source")
        from_user = isinstance(source, dict) and source.get("kind") == "user"
        if self.capture_content and self.turn is not None and from_user and "gen_ai.input.messages" not in self.turn.attributes:
            message = {"role": "user", "parts": [{"type": "text", "content": _text(data.get("content"))}]}
            self.turn.attributes["gen_ai.input.messages"] = json.dumps([message], ensure_ascii=False)

    def _context_message(self, at: int, data: Mapping[str, object]) -> None:
        source = data.get("source")
        if not (isinstance(source, dict) and source.get("plugin") == "time-context"):
            return
        match = _READING.search(_text(data.get("content")))
        attrs: dict[str, AttrValue] = {}
        if match:
            attrs = {
                "dsh.time.sampled": match.group(1),
                "dsh.time.zone": match.group(2),
                "dsh.time.elapsed": match.group(5),
                "dsh.time.elapsed_since": match.group(4).removeprefix("Elapsed since ").removeprefix("the "),
            }
            if match.group(3) is not None:
                attrs["dsh.time.request_zone"] = match.group(3)
        self.pending.append(SpanEvent("dsh.time_context.reading", at, attrs))

    def _step_start(self, at: int, data: Mapping[str, object]) -> None:
        if self.chat is not None:
            self._end(self.chat, self.chat.end_ms if self.chat.end_ms is not None else at)
        attrs = self._base("chat")
        step = data.get("step")
        if isinstance(step, int):
            attrs["dsh.step"] = step
        self.chat = self._open(f"chat {self.model or '?'}", "client", at, self.turn or self.parent, attrs)
        self.chat.events.extend(self.pending)
        self.pending = []
        if self.model is not None:
            self._name_chat(self.chat, self.model)

    def _name_chat(self, chat: SpanData, model: str) -> None:
        chat.name = f"chat {model}"
        chat.attributes["gen_ai.request.model"] = model
        chat.attributes["gen_ai.response.model"] = model
        chat.attributes["gen_ai.provider.name"] = provider_of(model)

    def _request_header(self, at: int, data: Mapping[str, object]) -> None:
        header = data.get("header")
        config = header.get("config") if isinstance(header, dict) else None
        model = config.get("model") if isinstance(config, dict) else None
        if isinstance(model, str) and model:
            self.model = model
            if self.chat is not None:
                self._name_chat(self.chat, model)

    def _chunk(self, at: int, data: Mapping[str, object]) -> None:
        chunk = data.get("chunk")
        if self.chat is not None and isinstance(chunk, dict) and chunk.get("type") == "finish":
            reason = chunk.get("reason")
            kind = reason.get("kind") if isinstance(reason, dict) else None
            if isinstance(kind, str):
                self.chat.attributes["gen_ai.response.finish_reasons"] = [kind]

    def _assistant_message(self, at: int, data: Mapping[str, object]) -> None:
        chat = self.chat
        if chat is None:
            return
        usage = data.get("usage")
        if isinstance(usage, dict):
            counts = {k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
            read, write = counts.get("cacheReadTokens", 0), counts.get("cacheWriteTokens", 0)
            # The conventions count cached tokens inside input_tokens; dsh logs them apart.
            chat.attributes["gen_ai.usage.input_tokens"] = counts.get("inputTokens", 0) + read + write
            chat.attributes["gen_ai.usage.output_tokens"] = counts.get("outputTokens", 0)
            if "cacheReadTokens" in counts:
                chat.attributes["gen_ai.usage.cache_read.input_tokens"] = read
            if "cacheWriteTokens" in counts:
                chat.attributes["gen_ai.usage.cache_creation.input_tokens"] = write
            if "reasoningTokens" in counts:
                chat.attributes["gen_ai.usage.reasoning.output_tokens"] = counts["reasoningTokens"]
            model = self.model or ""
            cost = call_cost_usd(model, counts, at_ms=at)
            if cost is not None:
                chat.attributes["dsh.cost.usd"] = cost
            self.turn_costs.append(cost)
            self.calls.append((model, provider_of(model), counts, (at - chat.start_ms) / 1000, cost))
        if self.capture_content:
            message = {"role": "assistant", "parts": _parts(data.get("content"))}
            chat.attributes["gen_ai.output.messages"] = json.dumps([message], ensure_ascii=False)
        self._end(chat, at)
        self.chat = None

    def _tool_call(self, at: int, data: Mapping[str, object]) -> None:
        call_id, name = str(data.get("callId", "")), str(data.get("name", ""))
        attrs = self._base("execute_tool")
        attrs.update({"gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function"})
        if self.capture_content:
            attrs["gen_ai.tool.call.arguments"] = str(data.get("arguments", ""))
        self.tools[call_id] = self._open(f"execute_tool {name}", "internal", at, self.turn or self.parent, attrs)

    def _tool_result(self, at: int, data: Mapping[str, object]) -> None:
        span = self.tools.pop(str(data.get("callId", "")), None)
        if span is None:
            return
        if data.get("isError"):
            error = data.get("error")
            code = error.get("code") if isinstance(error, dict) else None
            span.attributes["error.type"] = str(code or "tool_error")
            span.error = _text(data.get("content"))[:200] or "tool error"
        if self.capture_content:
            span.attributes["gen_ai.tool.call.result"] = _text(data.get("content"))
        self._end(span, at)

    def _approval_asked(self, at: int, data: Mapping[str, object]) -> None:
        call_id = data.get("callId")
        parent = self.tools.get(call_id) if isinstance(call_id, str) else None
        attrs: dict[str, AttrValue] = {"dsh.approval.tool": str(data.get("toolName", ""))}
        if isinstance(data.get("reason"), str):
            attrs["dsh.approval.reason"] = str(data["reason"])
        span = self._open("dsh.approval", "internal", at, parent or self.turn or self.parent, attrs)
        self.approvals[str(data.get("id", ""))] = span

    def _approval_decided(self, at: int, data: Mapping[str, object]) -> None:
        span = self.approvals.pop(str(data.get("id", "")), None)
        if span is not None:
            span.attributes["dsh.approval.outcome"] = str(data.get("outcome", ""))
            self._end(span, at)

    def _compact_start(self, at: int, data: Mapping[str, object]) -> None:
        if self.compaction is None:
            self.compaction = self._open("dsh.compaction", "internal", at, self.turn or self.parent, {})

    def _compact_end(self, at: int, data: Mapping[str, object]) -> None:
        span, self.compaction = self.compaction, None
        if span is not None:
            if isinstance(data.get("error"), str):
                span.attributes["error.type"] = "compaction_error"
                span.error = str(data["error"])[:200]
            self._end(span, at)

    def _compact_summary(self, at: int, data: Mapping[str, object]) -> None:
        if self.compaction is not None and isinstance(data.get("shadowedTokenCount"), int):
            self.compaction.attributes["dsh.compaction.shadowed_tokens"] = int(data["shadowedTokenCount"])  # type: ignore[call-overload]

    def _prompt_blocked(self, at: int, data: Mapping[str, object]) -> None:
        if self.turn is not None:
            self.turn.events.append(SpanEvent("dsh.prompt.blocked", at, {}))

    def _step_end(self, at: int, data: Mapping[str, object]) -> None:
        if self.chat is not None:
            # A step that ended without an answer: the turn/end that follows says why, so the
            # span stays open until then (it ends at this event's time).
            self.chat.end_ms = at

    def _turn_end(self, at: int, data: Mapping[str, object]) -> None:
        turn = self.turn
        if turn is None:
            return
        reason = data.get("reason")
        kind = reason.get("kind") if isinstance(reason, dict) else None
        turn.attributes["dsh.turn.reason"] = str(kind or "none")
        if kind in _ENDED_BADLY and isinstance(reason, dict):
            code = reason.get("code")
            turn.attributes["error.type"] = str(code or kind)
            turn.error = str(reason.get("message") or reason.get("reason") or kind)
            if self.chat is not None:
                self.chat.attributes["error.type"] = str(code or kind)
                self.chat.error = turn.error
        if self.turn_costs and None not in self.turn_costs:
            turn.attributes["dsh.cost.usd"] = sum(c for c in self.turn_costs if c is not None)
        turn.events.extend(self.pending)
        self.pending = []
        self.close(at, turn_ended=True)  # the turn ends last, after what it holds


def _parts(content: object) -> list[dict[str, object]]:
    parts: list[dict[str, object]] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append({"type": "text", "content": block.get("text", "")})
        elif block.get("type") == "tool-call":
            parts.append({"type": "tool_call", "id": block.get("id"), "name": block.get("name"), "arguments": block.get("arguments")})
    return parts


_HANDLERS = {
    "turn/start": SessionTracer._turn_start,
    "user/message": SessionTracer._user_message,
    "context/message": SessionTracer._context_message,
    "step/start": SessionTracer._step_start,
    "request/header": SessionTracer._request_header,
    "assistant/chunk": SessionTracer._chunk,
    "assistant/message": SessionTracer._assistant_message,
    "tool/call": SessionTracer._tool_call,
    "tool/result": SessionTracer._tool_result,
    "approval/asked": SessionTracer._approval_asked,
    "approval/decided": SessionTracer._approval_decided,
    "compact/start": SessionTracer._compact_start,
    "compact/summary": SessionTracer._compact_summary,
    "compact/end": SessionTracer._compact_end,
    "prompt/blocked": SessionTracer._prompt_blocked,
    "step/end": SessionTracer._step_end,
    "turn/end": SessionTracer._turn_end,
}
