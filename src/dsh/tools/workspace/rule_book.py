"""The rules the approval service decides by, and how a decision is recorded.

:class:`RuleBook` holds the allow/ask/deny rules of the flags and settings files (each with its
source, :class:`~dsh.permissions.policy.RuleText`), parsed once per workspace; the "always allow
in this project" rules of the dsh home (:class:`~dsh.permissions.project.ProjectRules`, read at
each decision, so a rule removed elsewhere stops at once); the session's own rules; and
``--dangerously-skip-approvals``. Deny over ask over allow, whatever the source.

:class:`Verdict` is one decision and its ``approval/decided`` event: ``outcome`` (the
reference's values), ``by`` (``rule``, ``person``, ``mode``, ``hook`` or ``policy``), and for ``rule`` the
``rule`` text and its ``source``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from dsh.permissions import Rule, RuleError, parse_rule
from dsh.permissions.policy import Decision, RuleText, check_rules, decide
from dsh.permissions.project import ProjectRules, ProjectRulesError, source_of
from dsh.session.vocab import JsonObject

__all__ = [
    "SESSION_SOURCE",
    "SKIP_SOURCE",
    "Always",
    "ApprovalOutcome",
    "By",
    "RuleBook",
    "Verdict",
]

log = logging.getLogger("dsh.approval")

SKIP_SOURCE: Final = "--dangerously-skip-approvals"
SESSION_SOURCE: Final = "session"
By: TypeAlias = Literal["rule", "person", "mode", "hook", "policy"]
ApprovalOutcome: TypeAlias = Literal[
    "allowed-once", "allowed-session", "rejected", "cancelled", "unavailable"
]


@dataclass(frozen=True)
class Always:
    """An asker's answer "always" for one of the request's scopes: ``deny`` false is "always
    allow in this project" (a project rule in the dsh home), true is "reject always" (a session
    deny rule)."""

    rule: Rule
    deny: bool = False


@dataclass(frozen=True)
class Verdict:
    outcome: ApprovalOutcome
    by: By
    scope: Rule | None = None  # the session rule granted (or, rejected by a person, denied)
    decision: Decision | None = None  # the rule that decided
    project_rule: Rule | None = None  # "always allow in this project"
    source: str | None = None  # of a mode

    def event(self, request_id: str) -> JsonObject:
        out: JsonObject = {"id": request_id, "outcome": self.outcome}
        if self.by != "policy":  # the policy's own refusals keep the reference's shape
            out["by"] = self.by
        if self.scope is not None:
            out["scope"] = str(self.scope)
        if self.decision is not None:
            out["rule"] = str(self.decision.rule)
            out["source"] = self.decision.source
        elif self.source is not None:
            out["source"] = self.source
        if self.project_rule is not None:
            out["projectRule"] = str(self.project_rule)
        return out


@dataclass
class RuleBook:
    texts: list[RuleText] = field(default_factory=list)
    skip_approvals: bool = False
    project: ProjectRules | None = None
    session_denies: bool = False  # some session has a deny rule: the gate sees every call
    _compiled: dict[str, list[Decision]] = field(default_factory=dict)
    _warned: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        # Tool coverage does not depend on the workspace: parse once to refuse bad rules early.
        check_rules(self.texts, "/")
        self._names = [(t.action, t.parse("/")) for t in self.texts]

    def may_restrict(self, tool_name: str) -> bool:
        """Whether a deny or ask rule could cover a call of ``tool_name``."""
        return self.session_denies or any(
            action != "allow" and rule.covers(tool_name) for action, rule in self._names
        )

    def _static(self, workspace: str) -> list[Decision]:
        compiled = self._compiled.get(workspace)
        if compiled is None:
            compiled = self._compiled[workspace] = [
                Decision(t.action, t.parse(workspace), t.source) for t in self.texts
            ]
        return compiled

    def project_rules(self, workspace: str) -> list[Decision]:
        if self.project is None:
            return []
        try:
            texts = self.project.rules(workspace)
        except ProjectRulesError as exc:
            if str(exc) not in self._warned:  # fails closed: grants nothing, said once
                self._warned.add(str(exc))
                log.warning("%s", exc)
            return []
        out = []
        for text in texts:
            try:
                out.append(Decision("allow", parse_rule(text), source_of(self.project.path)))
            except RuleError:
                continue  # an unreadable entry grants nothing
        return out

    def in_force(
        self, workspace: str | None, allowed: Iterable[Rule] = (), denied: Iterable[Rule] = ()
    ) -> list[Decision]:
        """Every rule that applies in ``workspace``, in precedence order within each source."""
        out: list[Decision] = []
        if workspace is not None:
            out += self._static(workspace) + self.project_rules(workspace)
        else:
            out += [Decision(t.action, rule, t.source) for t, (_, rule) in zip(self.texts, self._names, strict=True)]
        out += [Decision("deny", r, SESSION_SOURCE) for r in denied]
        out += [Decision("allow", r, SESSION_SOURCE) for r in allowed]
        return out

    def decide(
        self,
        tool_name: str,
        subject: str | None,
        workspace: str | None,
        allowed: Sequence[Rule],
        denied: Sequence[Rule],
    ) -> Decision | None:
        return decide(self.in_force(workspace, allowed, denied), tool_name, subject)

    def remember(self, workspace: str, rule: Rule) -> None:
        if self.project is None:
            return
        try:
            self.project.add(workspace, str(rule))
        except (OSError, ProjectRulesError) as exc:
            log.warning("could not remember %s for %s: %s", rule, workspace, exc)

    def forget(self, decision: Decision, workspace: str) -> bool:
        """Remove one rule from this process (and, for a project rule, from the dsh home)."""
        if self.project is not None and decision.source == source_of(self.project.path):
            return self.project.remove(workspace, str(decision.rule))
        for index, text in enumerate(self.texts):
            if text.source == decision.source and text.action == decision.action and text.parse(workspace) == decision.rule:
                del self.texts[index]
                del self._names[index]
                self._compiled.clear()
                return True
        return False
