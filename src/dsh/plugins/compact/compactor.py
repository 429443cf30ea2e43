"""The ``compact`` service (:class:`Compactor`, ``ctx.require(COMPACT)``): pressure, the
automatic pre-step listener, and one compaction from plan to ``compact/end``.

One compaction, inside the open turn: ``compact/start {turn}``, the summariser,
``compact/summary``, the checkpoint ``user/message`` (a ``replace`` surface op) and
``compact/end {turn}``, or ``compact/end {turn, error}`` with nothing replaced. An idle agent's
compaction summarises first and then writes its whole one-shot turn at once.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dsh.agent.agent import Agent, flush_turn, side_turn
from dsh.agent.hooks import PreStep
from dsh.llm.service import LLM
from dsh.plugins.compact.config import Config
from dsh.plugins.compact.estimate import Estimator, make_estimator
from dsh.plugins.compact.result import SOURCE, CompactionError, CompactResult
from dsh.plugins.compact.scheduling import (
    RETRY,
    Retry,
    StepRequests,
    error_text,
    placement,
)
from dsh.plugins.compact.select import CompactRange, covered_span, select_range, tool_cut_points
from dsh.plugins.compact.summariser import summarize
from dsh.plugins.compact.transcript import checkpoint_content, render_transcript, span_line
from dsh.plugins.time_context import TIME_CONTEXT
from dsh.runtime import AbortSignal, Context, ServiceKey
from dsh.session import Event, Session
from dsh.session.vocab import COMPLETED, TextBlock, TurnEndReason, error_reason

__all__ = ["COMPACT", "Compactor"]

log = logging.getLogger("dsh.compact")


@dataclass(frozen=True)
class _Plan:
    start: int
    end: int
    position: int
    seqs: tuple[int, ...]
    tokens: int
    first_ms: int
    last_ms: int


@dataclass(frozen=True)
class _Summary:
    """A summariser's answer and the checkpoint content built from it."""

    model: str
    summary: list[TextBlock]
    content: list[TextBlock]


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


class Compactor:
    """The ``compact`` service and the automatic pre-step listener."""

    def __init__(self, ctx: Context, config: Config, estimator: Estimator | None = None) -> None:
        self._ctx = ctx
        self.config = config
        self.estimator = estimator if estimator is not None else make_estimator(config)
        self._pressure: weakref.WeakKeyDictionary[Session, _Pressure] = weakref.WeakKeyDictionary()
        self._spans: weakref.WeakKeyDictionary[Session, dict[int, tuple[int, int]]] = (
            weakref.WeakKeyDictionary()
        )
        self._requests = StepRequests()

    @property
    def threshold(self) -> int:
        return self.config.threshold

    def threshold_for(self, agent: Agent) -> int:
        """The threshold for ``agent``'s requests: from ``contextWindow``, else from the catalog's
        window for the model of its next request."""
        model = agent.options.model
        if not model and agent.last_request_header is not None:
            config = agent.last_request_header.get("config")
            model = config.get("model") if isinstance(config, Mapping) else None
        return self.config.threshold_for(model if isinstance(model, str) else None)

    # -- estimates -------------------------------------------------------------------------

    def pressure(
        self, session: Session, system: str | None = "", prefix: Iterable[Mapping[str, object]] = ()
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
        prefix: Sequence[Mapping[str, object]],
        signal: AbortSignal | None,
    ) -> None:
        if signal is not None and signal.aborted:
            return
        await self._requests.serve(agent, signal, lambda s: self._compact_in_turn(agent, s))
        if not self.config.auto or (signal is not None and signal.aborted):
            return
        try:
            await self.auto_compact(agent, system, prefix, signal)
        except Exception as exc:
            log.warning("compaction failed: %s; proceeding with full history", error_text(exc))

    async def auto_compact(
        self,
        agent: Agent,
        system: str | None = "",
        prefix: Sequence[Mapping[str, object]] = (),
        signal: AbortSignal | None = None,
    ) -> list[CompactResult]:
        """Compact while the pressure is at or above the threshold (raises when it stays)."""
        session = agent.session
        threshold = self.threshold_for(agent)
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
        model: object = self.config.summarization_model or agent.options.model
        if not model and agent.last_request_header is not None:
            config = agent.last_request_header.get("config")
            model = config.get("model") if isinstance(config, Mapping) else None
        if not model:
            raise CompactionError(
                "compaction has no summarization model: set summarizationModel or the agent's model"
            )
        return str(model)

    async def _summarize(
        self, agent: Agent, plan: _Plan, signal: AbortSignal | None
    ) -> _Summary:
        """Run the summariser over the plan; its summary must be smaller than the span."""
        session = agent.session
        model = self._model(agent)
        summary = await summarize(
            self._ctx.require(LLM),
            render_transcript(session.events, plan.seqs),
            model=model,
            max_tokens=self.config.max_tokens,
            session_id=session.id,
            signal=signal,
        )
        time_context = self._ctx.get(TIME_CONTEXT)
        content = checkpoint_content(summary, span_line(plan.first_ms, plan.last_ms, time_context))
        framed = self.estimator.content(content)
        if framed >= plan.tokens:
            raise CompactionError(
                "summary is not smaller than the shadowed content "
                f"({framed} >= {plan.tokens} estimated tokens)"
            )
        return _Summary(model, summary, content)

    def _unchanged(self, session: Session, plan: _Plan) -> bool:
        surface = session.surface
        return surface[plan.position : plan.position + len(plan.seqs)] == plan.seqs

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
        index: _CompactIndex = session.attach_index(_CompactIndex, _CompactIndex)
        if index.in_progress:
            raise CompactionError("compaction already in progress")
        plan = self._plan(session, start, end)
        start_event = session.append("compact/start", {"turn": turn})
        try:
            summary = await self._summarize(agent, plan, signal)
            if not self._unchanged(session, plan):
                raise CompactionError("compactRegion: the surface changed while summarizing")
        except BaseException as exc:
            session.append("compact/end", {"turn": turn, "error": error_text(exc)})
            raise
        return self._finish(session, turn, plan, start_event.seq, summary)

    def _finish(
        self, session: Session, turn: int, plan: _Plan, start_seq: int, summary: _Summary
    ) -> CompactResult:
        """Append the summary, the checkpoint and ``compact/end``; the compaction's record."""
        summary_event = session.append(
            "compact/summary",
            {
                "summary": summary.summary,
                "shadowedRange": {"start": plan.start, "end": plan.end},
                "shadowedSeqs": list(plan.seqs),
                "shadowedTokenCount": plan.tokens,
                "model": summary.model,
                "maxTokens": self.config.max_tokens,
            },
        )
        checkpoint = session.append(
            "user/message",
            {"content": summary.content, "source": dict(SOURCE)},
            surface_op={"op": "replace", "start": plan.start, "end": plan.end},
            source_event_seqs=[start_seq, summary_event.seq, *plan.seqs],
        )
        end_event = session.append("compact/end", {"turn": turn})
        return CompactResult(
            turn, plan.start, plan.end, plan.seqs, plan.tokens, summary.summary, summary.model,
            start_seq, summary_event.seq, checkpoint.seq, end_event.seq,
        )

    # -- manual compaction -----------------------------------------------------------------

    async def compact_now(
        self, agent: Agent, signal: AbortSignal | None = None
    ) -> CompactResult | None:
        """Compact the oldest span now, whatever the pressure; ``None`` if nothing qualifies.

        Where it runs is :func:`~dsh.plugins.compact.scheduling.placement`'s rule. Do not await
        it from a tool: the step waits for the tool and the compaction for the next step.
        """
        while True:
            where = placement(agent, signal)
            if where == "in-turn":
                return await self._compact_in_turn(agent, signal)
            if where == "idle":
                outcome = await self._compact_idle(agent, signal)
            else:
                outcome = await self._requests.wait(agent, signal)
            if not isinstance(outcome, Retry):
                return outcome

    async def _compact_in_turn(
        self, agent: Agent, signal: AbortSignal | None
    ) -> CompactResult | None:
        session = agent.session
        selected = self.select_range(session)
        if selected is None:
            return None
        return await self.compact_region(session, selected.start, selected.end, agent, signal)

    async def _compact_idle(
        self, agent: Agent, signal: AbortSignal | None
    ) -> CompactResult | Retry | None:
        """Summarise first, then write the whole one-shot turn at once, so a prompt arriving
        meanwhile can never interleave its turn with ours."""
        session = agent.session
        selected = self.select_range(session)
        if selected is None:
            return None
        plan = self._plan(session, selected.start, selected.end)
        error: BaseException | None = None
        summary: _Summary | None = None
        try:
            summary = await self._summarize(agent, plan, signal)
        except Exception as exc:
            error = exc
        busy = session.open_turn is not None or agent.status == "running" or bool(agent.queued)
        if busy or not self._unchanged(session, plan):
            if error is not None:
                raise error
            return RETRY
        result: CompactResult | None = None

        def body(turn: int) -> TurnEndReason:
            nonlocal result
            start_event = session.append("compact/start", {"turn": turn})
            if summary is not None:
                result = self._finish(session, turn, plan, start_event.seq, summary)
                return COMPLETED
            message = error_text(error) if error is not None else "compaction failed"
            session.append("compact/end", {"turn": turn, "error": message})
            return error_reason(0, message)

        turn = side_turn(session, dict(SOURCE), body)
        await flush_turn(self._ctx, agent, turn)
        if error is not None:
            raise error
        return result


COMPACT: ServiceKey[Compactor] = ServiceKey("compact")
"""The compaction service (``ctx.require(COMPACT)``), for ``/compact`` and other callers."""
