"""Running the hooks an event selects, recording each run, and folding their outputs.

Every run is recorded in the session, inside the open turn, as the reference's log-only pair:

- ``hook/invoked`` ``{turn, point, dialect: "claude", handlerId, matcher?, command, source}``
- ``hook/result`` ``{turn, point, handlerId, decision, exitCode?, durationMs, stderrSummary?,
  stdoutSummary?, timedOut?, error?}``; ``decision`` is ``allow``, ``deny``, ``ask``, ``block``,
  ``stop`` (``continue: false``) or ``pass``; each summary is the stream trimmed and cut at
  ``summaryChars`` (500) with ``…``.

With no open turn (``SessionEnd``, a ``Notification`` that outlived its turn) the hook still
runs and nothing is recorded: the log's events all sit inside turns. Hooks of one event run one
after another in the order of the files (user files first), identical commands once.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsh.apps.escape import escape_controls
from dsh.plugins.hooks.config import Config, Hook, matches
from dsh.plugins.hooks.runner import HookOutput, RunOutcome, parse_output, run_command
from dsh.runtime import Context
from dsh.runtime.abort import AbortSignal

__all__ = ["Folded", "HookEngine", "summary"]

log = logging.getLogger("dsh.hooks")

_RANK = {None: 0, "allow": 1, "ask": 2, "deny": 3, "block": 3}


@dataclass
class Folded:
    """What the runs of one event decided together (most restrictive wins)."""

    decision: str | None = None
    """``allow``, ``ask``, ``deny`` (``block`` folds into ``deny``) or ``None``."""
    reasons: list[str] = field(default_factory=list)
    contexts: list[str] = field(default_factory=list)
    ran: int = 0

    @property
    def reason(self) -> str | None:
        return "\n\n".join(self.reasons) or None


def summary(text: str, limit: int) -> str | None:
    text = text.strip()
    if not text:
        return None
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _decision_of(output: HookOutput) -> str:
    if output.decision is not None:
        return output.decision
    return "stop" if output.stop else "pass"


class HookEngine:
    """The hooks in force for one composition, and how an event runs them."""

    def __init__(self, ctx: Context, config: Config, hooks: Sequence[Hook]) -> None:
        self.ctx = ctx
        self.config = config
        self.hooks = list(hooks)

    def selected(self, event: str, subjects: Iterable[str]) -> list[Hook]:
        names = list(subjects)
        seen: set[str] = set()
        chosen: list[Hook] = []
        for hook in self.hooks:
            if hook.event != event or hook.command in seen:
                continue
            if names and not matches(hook.matcher, names):
                continue
            seen.add(hook.command)
            chosen.append(hook)
        return chosen

    def base_payload(self, agent: Any, event: str) -> dict[str, Any]:
        session = agent.session
        header = session.header
        return {
            "session_id": session.id,
            "transcript_path": self._transcript(header),
            "cwd": header.get("cwd") or os.getcwd(),
            "hook_event_name": event,
        }

    def _transcript(self, header: dict[str, Any]) -> str:
        from dsh.persistence.base import SESSION_STORE

        store = self.ctx.get(SESSION_STORE)
        if store is None:
            return ""
        try:
            return store.locate(header) or ""
        except Exception:
            return ""

    async def run(
        self,
        event: str,
        agent: Any,
        payload: dict[str, Any],
        *,
        subjects: Iterable[str] = (),
        signal: AbortSignal | None = None,
    ) -> Folded:
        """Run every hook ``event`` selects for ``subjects`` (empty: matchers ignored)."""
        folded = Folded()
        hooks = self.selected(event, subjects)
        if not hooks:
            return folded
        session = agent.session
        cwd = str(session.header.get("cwd") or os.getcwd())
        env = {**os.environ, "CLAUDE_PROJECT_DIR": cwd}
        for hook in hooks:
            handler = f"claude:{event}:{uuid.uuid4().hex[:12]}"
            turn = session.open_turn
            if turn is not None:
                invoked: dict[str, Any] = {"turn": turn, "point": event, "dialect": "claude", "handlerId": handler}
                if hook.matcher:
                    invoked["matcher"] = hook.matcher
                invoked["command"] = hook.command
                invoked["source"] = str(hook.source)
                session.append("hook/invoked", invoked)
            timeout = hook.timeout_s or self.config.default_timeout_seconds
            try:
                outcome = await run_command(hook.command, payload, cwd=cwd, env=env, timeout_s=timeout, signal=signal)
            except (TypeError, ValueError, OSError) as exc:  # never lose the turn to a hook
                outcome = RunOutcome(None, "", "", 0, error=str(exc))
            output = parse_output(event, outcome) if outcome.exit_code is not None else HookOutput()
            self._warn(hook, outcome, timeout)
            if turn is not None and session.open_turn == turn:
                session.append("hook/result", self._result(turn, event, handler, outcome, output))
            folded.ran += 1
            rank = _RANK.get(output.decision, 0)
            if rank > _RANK.get(folded.decision, 0):
                folded.decision = "deny" if output.decision == "block" else output.decision
                folded.reasons = []
            if rank and rank == _RANK.get(folded.decision, 0) and output.reason:
                folded.reasons.append(output.reason)
            if output.additional_context:
                folded.contexts.append(output.additional_context)
        return folded

    def _result(self, turn: int, event: str, handler: str, run: RunOutcome, output: HookOutput) -> dict[str, Any]:
        limit = self.config.summary_chars
        data: dict[str, Any] = {"turn": turn, "point": event, "handlerId": handler, "decision": _decision_of(output)}
        if run.exit_code is not None:
            data["exitCode"] = run.exit_code
        data["durationMs"] = run.duration_ms
        for key, text in (("stderrSummary", run.stderr), ("stdoutSummary", run.stdout)):
            cut = summary(text, limit)
            if cut is not None:
                data[key] = cut
        if run.timed_out:
            data["timedOut"] = True
        if run.cancelled:
            data["cancelled"] = True
        if run.error is not None:
            data["error"] = run.error
        return data

    def _warn(self, hook: Hook, run: RunOutcome, timeout: float) -> None:
        what = f"hook {hook.event} {escape_controls(hook.command)!r} ({hook.source})"
        if run.error is not None:
            log.warning("%s could not start: %s", what, run.error)
        elif run.timed_out:
            log.warning("%s timed out after %gs and was killed", what, timeout)
        elif run.exit_code not in (None, 0, 2):
            first = (run.stderr.strip().splitlines() or [""])[0]
            tail = f": {escape_controls(first[:200])}" if first else ""
            log.warning("%s exited %s%s", what, run.exit_code, tail)
