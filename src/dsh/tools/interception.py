"""The seam a plugin uses to intercept tool calls: before the approval policy, and after a
successful run.

A *pre-tool hook* (``ToolRegistry.add_pre_tool_hook``) sees every call whose arguments fit the
tool's schema, before the approval gate, and returns a :class:`PreToolDecision`:

- ``deny``: the call is refused with ``Error: <reason>`` and never runs;
- ``ask``: the approval service asks (with the hook's reason) even for a tool that would not
  need approval; with no one to ask the call is refused, failing closed;
- ``allow``: counts as an approval rule for this call: the registry's gate is skipped, and an
  approval the tool itself requests while the call runs (unconfined ``bash``, a write outside
  the workspace) is answered ``allowed-once`` (:data:`PREAPPROVED`), unless the policy is
  ``never``;
- ``none``: no opinion; the approval policy decides as before.

Several hooks fold most restrictively (``deny`` > ``ask`` > ``allow`` > ``none``). A *post-tool
hook* sees each call that ran without error and may return a changed result (feedback appended,
``additional_contexts`` added). The hooks plugin (:mod:`dsh.plugins.hooks`) is the user of both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, TypeAlias

from dsh.tools.types import Tool, ToolCall, ToolResult

__all__ = ["PREAPPROVED", "PostToolHook", "PreToolDecision", "PreToolHook", "fold", "preapproved"]

DecisionKind: TypeAlias = Literal["none", "allow", "ask", "deny"]
_RANK: dict[str, int] = {"none": 0, "allow": 1, "ask": 2, "deny": 3}


@dataclass(frozen=True)
class PreToolDecision:
    kind: DecisionKind = "none"
    reason: str | None = None
    contexts: tuple[object, ...] = ()
    """``additionalContexts`` entries to inject after the step's results."""


NO_OPINION = PreToolDecision()

PreToolHook: TypeAlias = Callable[[Tool, ToolCall], Awaitable[PreToolDecision]]
PostToolHook: TypeAlias = Callable[[Tool, ToolCall, ToolResult], Awaitable[ToolResult]]

PREAPPROVED: ContextVar[bool] = ContextVar("dsh_tool_preapproved", default=False)
"""True while a call a pre-tool hook allowed runs (read by the approval service)."""


def preapproved() -> bool:
    return PREAPPROVED.get()


def fold(decisions: list[PreToolDecision]) -> PreToolDecision:
    """The most restrictive decision; its reasons joined, every decision's contexts kept."""
    if not decisions:
        return NO_OPINION
    top = max(decisions, key=lambda d: _RANK[d.kind])
    reasons = [d.reason for d in decisions if d.kind == top.kind and d.reason]
    contexts = tuple(c for d in decisions for c in d.contexts)
    return PreToolDecision(top.kind, "\n\n".join(reasons) or None, contexts)
