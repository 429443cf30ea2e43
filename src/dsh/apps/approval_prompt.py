"""The terminal's inline approval prompt (an :class:`~dsh.tools.workspace.approval.Asker`).

Shows the tool, the reason and the call's arguments (control characters escaped, long values cut),
then asks ``allow once / allow for this session / deny``. Anything but a clear yes denies;
Ctrl-C or Ctrl-D at the prompt denies. Only terminal mode installs it: in plain mode there is no
one to ask and requests fail closed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from prompt_toolkit import PromptSession

from dsh.tools.workspace.approval import ApprovalOutcome, ApprovalRequest

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
    return _escape(
        f"approval needed: {request.tool_name}\n  why:  {request.reason}\n  args: {args}"
    )


def parse_answer(answer: str) -> ApprovalOutcome:
    choice = answer.strip().lower()
    if choice in ("y", "yes", "o", "once"):
        return "allowed-once"
    if choice in ("s", "session", "a", "always"):
        return "allowed-session"
    return "rejected"


class TerminalAsker:
    """Asks inline, below the streamed transcript (the agent is mid-turn, the prompt idle)."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write
        self._session: PromptSession[str] = PromptSession()

    async def __call__(self, request: ApprovalRequest) -> ApprovalOutcome:
        self._write("\n" + describe(request) + "\n")
        try:
            answer = await self._session.prompt_async(
                "  allow? [y] once / [s] for this session / [N] deny: ", handle_sigint=False
            )
        except (KeyboardInterrupt, EOFError):
            answer = ""
        outcome = parse_answer(answer)
        self._write(f"  → {outcome}\n")
        return outcome


def install(ctx: Any, write: Callable[[str], None]) -> Callable[[], None]:
    """Install the terminal asker on ``ctx.approval`` when approvals are mounted."""
    approval = ctx.get("approval")
    if approval is None:
        return lambda: None
    remove: Callable[[], None] = approval.set_asker(TerminalAsker(write))
    return remove
