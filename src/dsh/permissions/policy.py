"""Allow, ask and deny lists of permission rules, each rule with where it came from, and the
decision they make for one call.

A :class:`RuleText` is a rule as written (``bash(npm run test:*)``, ``Write(src/**)``) with its
list (``allow``/``ask``/``deny``), its source as the person reads it (``--allow``, ``user
settings /h/settings.json``) and, for a settings file, the folder ``/p`` paths start from. It
is parsed for a workspace (relative paths are relative to the workspace), once per workspace.

Precedence, whatever the source: **deny over ask over allow**. So no project rule, flag or
session answer can override a deny; a project ``ask`` makes a user ``allow`` ask again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from dsh.permissions.rules import Rule, RuleError, parse_rule

__all__ = ["ACTIONS", "Action", "Decision", "RuleText", "check_rules", "decide", "from_permissions"]

Action: TypeAlias = Literal["allow", "ask", "deny"]
ACTIONS: Final[tuple[Action, ...]] = ("deny", "ask", "allow")  # precedence order


@dataclass(frozen=True)
class RuleText:
    """One rule as written, in one list, from one source."""

    action: Action
    text: str
    source: str
    anchor: str | None = None  # the folder a ``/p`` path starts from (a settings file's)

    def parse(self, workspace: str) -> Rule:
        return parse_rule(self.text, base=workspace, anchor=self.anchor or workspace)


@dataclass(frozen=True)
class Decision:
    """The rule that decided a call: its list, the rule (canonical text) and its source."""

    action: Action
    rule: Rule
    source: str


def check_rules(texts: Iterable[RuleText], workspace: str) -> None:
    """Raise :class:`RuleError` naming the source of the first rule that does not parse."""
    for item in texts:
        try:
            item.parse(workspace)
        except RuleError as exc:
            raise RuleError(f"{item.source}: {item.action} rule {exc}") from None


def decide(
    rules: Sequence[tuple[RuleText, Rule]] | Sequence[Decision], tool_name: str, subject: str | None
) -> Decision | None:
    """The deciding rule for a call, deny over ask over allow; ``None`` when no rule matches."""
    found: dict[str, Decision] = {}
    for item in rules:
        decision = item if isinstance(item, Decision) else Decision(item[0].action, item[1], item[0].source)
        if decision.action not in found and decision.rule.matches(tool_name, subject):
            found[decision.action] = decision
    return next((found[a] for a in ACTIONS if a in found), None)


def from_permissions(section: Mapping[str, object], source: str, anchor: str | None = None) -> list[RuleText]:
    """The rules of a Claude Code shaped ``permissions`` object (``{"allow": [...], "ask":
    [...], "deny": [...]}``). Other keys (``defaultMode``, ``additionalDirectories``) are not
    rules and are left alone; a list that is not a list of strings is refused."""
    out: list[RuleText] = []
    for action in ("allow", "ask", "deny"):
        items = section.get(action, [])
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise RuleError(f'{source}: permissions.{action} must be a list of rule strings')
        out += [RuleText(action, text, source, anchor) for text in items]
    return out
