"""The terminal's inline approval prompt (an :class:`~dsh.tools.workspace.approval.Asker`).

Shows the tool, the reason and the call's arguments above the input line (control characters
escaped, long values cut), then asks ``allow once / allow for this session / deny`` on the input
line of the running terminal application (``TerminalUI.ask``: a second prompt cannot run inside
it). Anything but a clear yes denies; Ctrl-C at the question denies. Only terminal mode installs
it: in plain mode there is no one to ask and requests fail closed.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from dsh.plugins.subagent.lineage import label_of
from dsh.runtime import Context
from dsh.tools.workspace.approval import APPROVAL, ApprovalOutcome, ApprovalRequest

__all__ = ["TerminalAsker", "describe", "parse_answer"]

_MAX_ARGS = 600


def _escape(text: str) -> str:
    return "".join(
        ch if ch in "\n\t" or (ch.isprintable() and ch not in "\x1b\x7f") else repr(ch)[1:-1]
        for ch in text
    )


def describe(request: ApprovalRequest) -> str:
    """The request as the person sees it (arguments included, escaped, cut)."""
    try:
        args = json.dumps(request.arguments, ensure_ascii=False, indent=None)
    except (TypeError, ValueError):
        args = repr(request.arguments)
    if len(args) > _MAX_ARGS:
        args = args[:_MAX_ARGS] + f"… ({len(args)} chars)"
    label = label_of(request.agent)
    by = f" (asked by {label})" if label else ""
    return _escape(
        f"approval needed: {request.tool_name}{by}\n  why:  {request.reason}\n  args: {args}"
    )


def parse_answer(answer: str) -> ApprovalOutcome:
    choice = answer.strip().lower()
    if choice in ("y", "yes", "o", "once"):
        return "allowed-once"
    if choice in ("s", "session", "a", "always"):
        return "allowed-session"
    return "rejected"


QUESTION = "allow? [y] once / [s] for this session / [N] deny"


class TerminalAsker:
    """Asks on the terminal's input line while the agent waits mid-turn."""

    def __init__(self, ask: Callable[[str], Awaitable[str]], write: Callable[[str], None]) -> None:
        self._ask = ask
        self._write = write

    async def __call__(self, request: ApprovalRequest) -> ApprovalOutcome:
        self._write(describe(request) + "\n")
        outcome = parse_answer(await self._ask(QUESTION))
        self._write(f"  → {outcome}\n")
        return outcome


def install(ctx: Context, ask: Callable[[str], Awaitable[str]], write: Callable[[str], None]) -> Callable[[], None]:
    """Install the terminal asker on the approval service when approvals are mounted."""
    approval = ctx.get(APPROVAL)
    if approval is None:
        return lambda: None
    remove: Callable[[], None] = approval.set_asker(TerminalAsker(ask, write))
    return remove
