"""Approvals (``APPROVAL``): the policy, the audit events, session rules, and the seam an app
plugs an interactive asker into.

Policy ``ask`` puts a request to the installed :class:`Asker`; with none installed (plain mode,
headless runs) the request is ``unavailable`` and the call is refused: it **fails closed**.
Policy ``never`` rejects every request without asking. Each request is audited in the session as
the log-only pair ``approval/asked`` ``{id, toolName, callId?, reason?}`` and
``approval/decided`` ``{id, outcome}``; the model sees only the tool's outcome.

Beyond the reference: an asker may answer "allow for this session" with one of the request's
``scopes`` (:func:`dsh.permissions.session_scopes`: the exact command or a stated prefix for
``bash``, the exact path or its folder for ``write``/``edit``, the tool for others), and the
asker sees the call's arguments and its ``subject`` (the command or resolved path). The rule is
recorded as ``approval/decided`` ``scope`` (``Bash(npm test:*)``) and folded back from the log
on resume; an ``allowed-session`` without a readable ``scope`` (older logs) folds to nothing. The effective policy is told to the model once per session, in the reference's wording,
as an append-only raw ``context/message`` framed in ``<system-reminder>``; a later policy change appends a new notice.

Permission rules (:class:`~dsh.tools.workspace.rule_book.RuleBook`: allow/ask/deny lists from
flags and settings files, "always allow in this project", the session's own rules,
``--dangerously-skip-approvals``) decide before anyone is asked, deny over ask over allow; each
decision records who made it (``by``) and, for a rule, the rule and its ``source``. An
:class:`Always` answer is "always allow in this project" or (ACP) "reject always".

The tool registry calls :meth:`ApprovalService.authorize` for every tool with
``Tool.needs_approval`` (an untrusted MCP server's tools, say) or listed in ``approvalRequired``,
and for every tool a deny or ask rule could cover; the workspace tools call
:meth:`ApprovalService.check` for their own per-call conditions.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, TypeAlias

from dsh.permissions import Rule, RuleError, parse_rule, session_scopes
from dsh.permissions.policy import Decision
from dsh.permissions.scopes import Scope
from dsh.runtime.abort import AbortSignal
from dsh.runtime.keys import ServiceKey
from dsh.session.vocab import JsonObject
from dsh.tools.interception import preapproved
from dsh.tools.types import Tool, ToolCall
from dsh.tools.workspace._common import resolve_path, workspace_root
from dsh.tools.workspace.rule_book import (
    SESSION_SOURCE,
    SKIP_SOURCE,
    Always,
    ApprovalOutcome,
    RuleBook,
    Verdict,
)

__all__ = [
    "APPROVAL",
    "ASK_SENTENCE",
    "NEVER_SENTENCE",
    "Always",
    "Answer",
    "ApprovalOutcome",
    "ApprovalPolicy",
    "ApprovalRequest",
    "ApprovalService",
    "Asker",
]

ApprovalPolicy: TypeAlias = Literal["ask", "never"]
OUTCOMES: Final = frozenset({"allowed-once", "allowed-session", "rejected", "cancelled", "unavailable"})

ASK_SENTENCE: Final = (
    "Approval policy: ask. Operations that require approval may ask through the configured "
    "answerers; without an available answerer, the request fails closed."
)
NEVER_SENTENCE: Final = (
    "Approval prompts are disabled in this session: actions that require approval are rejected "
    "automatically — do not request sandbox escalation (do not set `sandbox_permissions`)."
)
SOURCE: Final = {"kind": "plugin", "plugin": "approval"}


@dataclass(frozen=True)
class ApprovalRequest:
    """One question for the person: which tool, why, and with what arguments."""

    agent: Any
    tool_name: str
    reason: str
    arguments: object = None
    call_id: str | None = None
    signal: AbortSignal | None = None
    # What the call acts on, shown first and in full: the bash command, or the resolved path.
    subject: str | None = None
    # What "allow for this session" may cover, narrowest first (rule, the sentence shown).
    scopes: tuple[Scope, ...] = ()
    # The workspace (project folder) of the call: where "always allow in this project" applies.
    workspace: str | None = None
    # Whether "always allow in this project" may be offered (project rules are on).
    offer_project: bool = False


Answer: TypeAlias = ApprovalOutcome | Rule | Always
"""An asker's answer: an outcome, one of the request's scope rules (allowed for the session), or
:class:`Always` of one (allowed in this project from now on). A plain ``allowed-session`` means
the narrowest scope."""


class Asker(Protocol):
    """An interactive answerer (the terminal's inline prompt). It may be sync or async."""

    def __call__(self, request: ApprovalRequest) -> Awaitable[Answer] | Answer: ...


def _has_open_turn(session: object) -> bool:
    return getattr(session, "open_turn", None) is not None


@dataclass
class _SessionState:
    allowed: list[Rule] = field(default_factory=list)
    denied: list[Rule] = field(default_factory=list)
    notice: str | None = None
    # Calls a person already allowed at the registry gate (an ask rule): not asked twice.
    approved_calls: set[str] = field(default_factory=set)

    def allow(self, rule: Rule) -> None:
        if rule not in self.allowed:
            self.allowed.append(rule)

    def deny(self, rule: Rule) -> None:
        if rule not in self.denied:
            self.denied.append(rule)


def _folded_rule(scope: object) -> Rule | None:
    """A logged scope back as a rule; anything unreadable grants nothing."""
    if not isinstance(scope, str):
        return None
    try:
        return parse_rule(scope)
    except RuleError:
        return None


def _subject_of(tool_name: str, call: ToolCall) -> str | None:
    """The subject of a call the registry gate asks about (``approvalRequired``): the command of
    ``bash``, the resolved path of a file tool; ``None`` for other tools."""
    args = call.arguments if isinstance(call.arguments, dict) else {}
    if tool_name == "bash":
        command = args.get("command")
        return command if isinstance(command, str) else None
    if tool_name in ("write", "edit", "read"):
        raw = args.get("file_path")
        if not isinstance(raw, str) or not raw or "\x00" in raw:
            return None
        try:
            return str(resolve_path(workspace_root(call), raw))
        except Exception:
            return None  # no resolvable path: no session scope, the question still asks
    return None


def _workspace_of(call: ToolCall) -> str | None:
    try:
        return str(workspace_root(call))
    except Exception:
        return None


def refusal_text(tool_name: str, outcome: str) -> str:
    """The model-visible error for a refused call (the call did not run)."""
    if outcome == "rejected":
        return f'approval rejected: the "{tool_name}" call was not run (rejected by the user or by the approval policy)'
    if outcome == "cancelled":
        return f'approval cancelled: the "{tool_name}" call was not run'
    return (
        f'approval unavailable: "{tool_name}" requires approval and no one can answer '
        "(no interactive answerer); the call was not run"
    )


class ApprovalService:
    """The approval service (``APPROVAL``): policy, audit, session rules and the asker seam."""

    def __init__(
        self,
        policy: ApprovalPolicy = "ask",
        required: Iterable[str] = (),
        *,
        book: RuleBook | None = None,
    ) -> None:
        if policy not in ("ask", "never"):
            raise ValueError(f'approval policy must be "ask" or "never", got "{policy}"')
        self.policy: ApprovalPolicy = policy
        self.required = frozenset(required)
        self.book = book if book is not None else RuleBook()
        self._asker: Asker | None = None
        self._sessions: dict[str, _SessionState] = {}

    # -- the asker seam ---------------------------------------------------------------------

    def set_asker(self, asker: Asker | None) -> Callable[[], None]:
        """Install the interactive answerer; returns a function that removes it."""
        self._asker = asker

        def remove() -> None:
            if self._asker is asker:
                self._asker = None

        return remove

    @property
    def asker(self) -> Asker | None:
        return self._asker

    # -- per-session state ------------------------------------------------------------------

    def _state(self, session: object) -> _SessionState:
        sid = str(getattr(session, "id", ""))
        state = self._sessions.get(sid)
        if state is None:
            state = self._sessions[sid] = _SessionState()
            # Fold earlier "allow for this session" answers and the last policy notice back
            # from the log, so a resumed session keeps both (nothing is re-announced).
            # Only the recorded scope is folded back: an older allowed-session without one was
            # for that call alone, which has run, so it grants nothing now.
            for event in getattr(session, "events", ()):
                if event.type == "approval/decided" and event.data.get("outcome") == "allowed-session":
                    rule = _folded_rule(event.data.get("scope"))
                    if rule is not None:
                        state.allow(rule)
                elif event.type == "approval/decided" and event.data.get("outcome") == "rejected":
                    # a "reject always" answer: a session deny rule (its scope)
                    rule = _folded_rule(event.data.get("scope"))
                    if rule is not None:
                        state.deny(rule)
                        self.book.session_denies = True
                elif event.type == "context/message" and event.data.get("source") == SOURCE:
                    content = event.data.get("content") or []
                    framed = "".join(b.get("text", "") for b in content if isinstance(b, dict))
                    state.notice = framed.removeprefix("<system-reminder>\n").removesuffix("\n</system-reminder>")
        return state

    def requires(self, tool: Tool) -> bool:
        """Whether the registry's gate must see calls of ``tool``: it needs approval, or a deny
        or ask rule could cover it."""
        return tool.needs_approval or tool.name in self.required or self.book.may_restrict(tool.name)

    def session_rules(self, session: object) -> tuple[list[Rule], list[Rule]]:
        """The session's own (allowed, denied) rules, for ``/permissions``."""
        state = self._state(session)
        return state.allowed, state.denied

    def rules_in_force(self, session: object, workspace: str) -> list[Decision]:
        """Every rule that applies to ``session`` in ``workspace``, with its source (for
        ``/permissions``)."""
        state = self._state(session)
        return self.book.in_force(workspace, state.allowed, state.denied)

    def forget(self, session: object, workspace: str, decision: Decision) -> bool:
        """Remove one rule: a session rule from the session (for this process; a resume folds
        the log's answers back), a project rule from the dsh home, another for this process."""
        if decision.source == SESSION_SOURCE:
            state = self._state(session)
            for rules in (state.allowed, state.denied):
                if decision.rule in rules:
                    rules.remove(decision.rule)
                    return True
            return False
        return self.book.forget(decision, workspace)

    # -- asking -----------------------------------------------------------------------------

    async def request(self, req: ApprovalRequest) -> ApprovalOutcome:
        """Decide one request under the policy; audited in the agent's session."""
        session = getattr(req.agent, "session", None)
        if session is None or not _has_open_turn(session):
            return "unavailable"  # no turn to audit in: refuse rather than decide unlogged
        state = self._state(session)
        request_id = str(uuid.uuid4())
        asked: JsonObject = {"id": request_id, "toolName": req.tool_name}
        if req.call_id is not None:
            asked["callId"] = req.call_id
        if req.reason:
            asked["reason"] = req.reason
        session.append("approval/asked", asked)
        verdict = await self._decide(req, state)
        if verdict.by == "person" and verdict.outcome == "rejected" and verdict.scope is not None:
            state.deny(verdict.scope)  # "reject always": a session deny rule
            self.book.session_denies = True
        elif verdict.outcome == "allowed-session" and verdict.scope is not None:
            state.allow(verdict.scope)
        if verdict.project_rule is not None and req.workspace is not None:
            self.book.remember(req.workspace, verdict.project_rule)
        session.append("approval/decided", verdict.event(request_id))
        return verdict.outcome

    async def _decide(self, req: ApprovalRequest, state: _SessionState) -> Verdict:
        if req.signal is not None and req.signal.aborted:
            return Verdict("cancelled", "policy")
        ruled = self.book.decide(req.tool_name, req.subject, req.workspace, state.allowed, state.denied)
        if ruled is not None and ruled.action == "deny":
            return Verdict("rejected", "rule", decision=ruled)
        if ruled is not None and ruled.action == "allow":
            if ruled.source == "session":
                return Verdict("allowed-session", "rule", scope=ruled.rule, decision=ruled)
            return Verdict("allowed-once", "rule", decision=ruled)
        if self.book.skip_approvals:
            return Verdict("allowed-once", "mode", source=SKIP_SOURCE)
        if self.policy == "never":
            return Verdict("rejected", "policy")
        if preapproved():  # a PreToolUse hook allowed this call: it counts as a rule
            return Verdict("allowed-once", "hook", source="PreToolUse hook")
        return await self._ask_person(req)

    async def _ask_person(self, req: ApprovalRequest) -> Verdict:
        asker = self._asker
        if asker is None:
            return Verdict("unavailable", "policy")
        try:
            answer = asker(req)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception:
            return Verdict("unavailable", "policy")  # a broken answerer fails the question closed
        if req.signal is not None and req.signal.aborted:
            return Verdict("cancelled", "policy")
        offered = [scope for scope, _ in req.scopes]
        if isinstance(answer, Always):
            if answer.rule not in offered:
                return Verdict("unavailable", "policy")
            if answer.deny:
                return Verdict("rejected", "person", scope=answer.rule)
            return Verdict("allowed-once", "person", project_rule=answer.rule)
        if isinstance(answer, Rule):
            # Only a scope the person was shown can be granted.
            if answer in offered:
                return Verdict("allowed-session", "person", scope=answer)
            return Verdict("unavailable", "policy")
        if answer == "allowed-session":
            # The narrowest scope shown; with none to offer, this one call only.
            if offered:
                return Verdict("allowed-session", "person", scope=offered[0])
            return Verdict("allowed-once", "person")
        if answer in OUTCOMES:
            return Verdict(answer, "person")
        return Verdict("unavailable", "policy")

    async def check(
        self,
        call: ToolCall,
        reason: str,
        *,
        tool_name: str | None = None,
        subject: str | None = None,
        rules_only: bool = False,
    ) -> str | None:
        """Ask for ``call``; ``None`` when allowed, else the model-visible refusal. ``subject``
        is what the call acts on (the command, the resolved path): shown first, and what a
        rule must match. ``rules_only``: the call needs no approval of its own; only a deny or
        ask rule decides it (nothing is asked or logged when none matches)."""
        name = tool_name or call.name
        if subject is None:
            subject = _subject_of(name, call)
        workspace = _workspace_of(call)
        session = getattr(call.agent, "session", None)
        state = self._state(session) if session is not None else None
        if state is not None and call.call_id is not None and call.call_id in state.approved_calls:
            return None  # a person allowed this very call at the gate (an ask rule)
        if rules_only:
            ruled = self.book.decide(
                name, subject, workspace, state.allowed if state else [], state.denied if state else []
            )
            if ruled is None or ruled.action == "allow":
                return None
            reason = f'{ruled.action} rule {ruled.rule} ({ruled.source})'
        outcome = await self.request(
            ApprovalRequest(
                agent=call.agent,
                tool_name=name,
                reason=reason,
                arguments=call.arguments,
                call_id=call.call_id,
                signal=call.signal,
                subject=subject,
                scopes=tuple(session_scopes(name, subject)),
                workspace=workspace,
                offer_project=self.book.project is not None and workspace is not None,
            )
        )
        if outcome in ("allowed-once", "allowed-session"):
            if rules_only and state is not None and call.call_id is not None:
                state.approved_calls.add(call.call_id)
            return None
        return refusal_text(name, outcome)

    async def authorize(self, tool: Tool, call: ToolCall) -> str | None:
        """The registry's gate: tools that always need approval, and calls a deny or ask rule
        may cover."""
        if not (tool.needs_approval or tool.name in self.required):
            return await self.check(call, "", tool_name=tool.name, rules_only=True)
        reason = (
            f'"{tool.name}" is marked as requiring approval'
            if tool.needs_approval
            else f'"{tool.name}" is listed in approvalRequired'
        )
        return await self.check(call, reason, tool_name=tool.name)

    # -- what the model is told -------------------------------------------------------------

    def sentence(self) -> str:
        return NEVER_SENTENCE if self.policy == "never" else ASK_SENTENCE

    def on_pre_step(self, agent: Any, *_args: object) -> None:
        """Tell the model the effective policy once (and again only when it changed)."""
        session = getattr(agent, "session", None)
        if session is None:
            return
        state = self._state(session)
        text = self.sentence()
        if state.notice == text:
            return
        state.notice = text
        # Framed like the other harness reminders and logged raw, so the sentence reaches the
        # model verbatim, once, after the history it applies to.
        framed = f"<system-reminder>\n{text}\n</system-reminder>"
        agent.inject([{"type": "text", "text": framed}], source=dict(SOURCE), envelope="raw")


APPROVAL: ServiceKey[ApprovalService] = ServiceKey("approval")
"""The approval service of the workspace tools (``ctx.get(APPROVAL)``)."""
