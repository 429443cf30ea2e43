"""``/permissions`` of terminal mode: the permission rules in force and where each came from
(flags, settings files, "always allow in this project", this session), numbered; ``/permissions
rm N`` removes one (a project rule from the dsh home; a flag, settings or session rule for the
rest of this process)."""

from __future__ import annotations

import os
from typing import Protocol

from dsh.apps.escape import escape_controls
from dsh.apps.term.host import TerminalApp
from dsh.permissions.policy import ACTIONS, Decision
from dsh.tools.workspace.approval import APPROVAL, ApprovalService

__all__ = ["run"]


class _UI(Protocol):
    app: TerminalApp

    def say(self, text: str) -> None: ...
    def error(self, text: str) -> None: ...


def _rules(approval: ApprovalService, app: TerminalApp) -> tuple[str, list[Decision]]:
    session = app.agent.session
    cwd = session.header.get("cwd")
    workspace = os.path.realpath(cwd if isinstance(cwd, str) and cwd else os.getcwd())
    rules = approval.rules_in_force(session, workspace)
    return workspace, sorted(rules, key=lambda d: ACTIONS.index(d.action))


def run(ui: _UI, arg: str) -> None:
    approval = ui.app.ctx.get(APPROVAL)
    if approval is None:
        ui.error("permissions: the workspace tools are not mounted")
        return
    workspace, rules = _rules(approval, ui.app)
    words = arg.split()
    if not words:
        if not rules:
            ui.say("no permission rules in force (what needs approval asks)")
            return
        ui.say("permission rules in force (deny over ask over allow):")
        for number, decision in enumerate(rules, 1):
            ui.say(escape_controls(f"  {number:>2}  {decision.action:<5}  {decision.rule}  ({decision.source})"))
        ui.say("remove one with /permissions rm N")
        return
    if words[0] in ("rm", "remove") and len(words) == 2 and words[1].isdigit() and 1 <= int(words[1]) <= len(rules):
        decision = rules[int(words[1]) - 1]
        if approval.forget(ui.app.agent.session, workspace, decision):
            ui.say(escape_controls(f"removed {decision.action} {decision.rule} ({decision.source})"))
        else:
            ui.error(escape_controls(f"could not remove {decision.rule} ({decision.source})"))
        return
    ui.error("usage: /permissions, or /permissions rm N (N from the list)")
