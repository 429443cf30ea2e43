"""The terminal's inline approval prompt (an :class:`~dsh.tools.workspace.approval.Asker`).

Shows, above the input line: the tool; then what the call acts on, **first and in full** (the
bash command, or the resolved path), so no other argument can push it out of sight; the reason;
every other argument (a long one is cut *after* its first 2,000 characters, saying how many
more there are: it is never what runs); and the answers, each session answer with the scope it
grants (``s) allow for this session: bash commands starting with "npm test"``). Every value is
escaped for the terminal: control characters as ``\\x1b``, newlines and tabs as ``\\n``/``\\t``,
and bidi and other invisible format characters as ``\\u202e``, so a value cannot fake the
layout or reorder what is shown. Then it asks on the input line of the running terminal
application (``TerminalUI.ask``: a second prompt cannot run inside it). Anything but a clear
answer denies; Ctrl-C at the question denies. Only terminal mode installs it: in plain mode
there is no one to ask and requests fail closed.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Awaitable, Callable
from typing import Final

from dsh.apps.escape import escape_controls
from dsh.permissions import Rule
from dsh.plugins.subagent.lineage import label_of
from dsh.runtime import Context
from dsh.tools.workspace.approval import APPROVAL, Always, Answer, ApprovalRequest

__all__ = ["TerminalAsker", "describe", "parse_answer", "question"]

# Other arguments are shown up to this many characters each (the subject never is cut).
_MAX_VALUE: Final = 2000
_SUBJECT_LABEL: Final = {"bash": ("command", "command")}
_PATH_TOOLS: Final = frozenset({"write", "edit", "read"})
_SCOPE_KEYS: Final = ("s", "p")


def shown(text: str) -> str:
    """One value made safe to print on one logical line: control characters, line breaks,
    tabs, and format characters (bidi overrides, zero-width marks) become visible escapes."""
    out: list[str] = []
    for ch in text:
        if ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif unicodedata.category(ch) in ("Cf", "Zl", "Zp"):
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return escape_controls("".join(out))


def _value(value: object) -> str:
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):
            text = repr(value)
    if len(text) > _MAX_VALUE:
        return shown(text[:_MAX_VALUE]) + f"… ({len(text) - _MAX_VALUE} more characters not shown)"
    return shown(text)


def _subject_key(request: ApprovalRequest) -> tuple[str, str] | None:
    """(label, argument key) of the request's subject, when it has one."""
    if request.subject is None:
        return None
    if request.tool_name in _PATH_TOOLS:
        return "path", "file_path"
    return _SUBJECT_LABEL.get(request.tool_name, ("subject", ""))


def describe(request: ApprovalRequest) -> str:
    """The request as the person sees it: the subject first and whole, then the rest."""
    label = label_of(request.agent)
    by = f" (asked by {shown(label)})" if label else ""
    lines = [f"approval needed: {shown(request.tool_name)}{by}"]
    subject = _subject_key(request)
    skip = ""
    if subject is not None and request.subject is not None:
        label, skip = subject
        lines.append(f"  {label}: {shown(request.subject)}")
    lines.append(f"  why: {shown(request.reason)}")
    args = request.arguments
    if isinstance(args, dict):
        for key, value in args.items():
            if key != skip:
                lines.append(f"  {shown(str(key))}: {_value(value)}")
    elif args is not None:
        lines.append(f"  args: {_value(args)}")
    lines.append("  y) allow once")
    for key, (rule, words) in zip(_SCOPE_KEYS, request.scopes, strict=False):
        lines.append(f"  {key}) allow for this session: {shown(words)}  [{shown(str(rule))}]")
    if _offers_project(request):
        rule, words = request.scopes[0]
        lines.append(f"  r) always allow in this project: {shown(words)}  [{shown(str(rule))}]")
    lines.append("  n) deny")
    return "\n".join(lines)


def _offers_project(request: ApprovalRequest) -> bool:
    return request.offer_project and bool(request.scopes)


def question(request: ApprovalRequest) -> str:
    count = min(len(request.scopes), len(_SCOPE_KEYS))
    always = " / [r] always here" if _offers_project(request) else ""
    if count == 0:
        return "allow? [y] once / [N] deny"
    if count == 1:
        return f"allow? [y] once / [s] for this session{always} / [N] deny"
    return f"allow? [y] once / [s] or [p] for this session{always} / [N] deny"


def parse_answer(answer: str, request: ApprovalRequest | None = None) -> Answer:
    """The answer typed; a session answer is the scope rule it names. Anything else denies."""
    choice = answer.strip().lower()
    if choice in ("y", "yes", "o", "once"):
        return "allowed-once"
    scopes = request.scopes if request is not None else ()
    if choice == "r" and request is not None and _offers_project(request):
        return Always(scopes[0][0])
    index = {"s": 0, "session": 0, "a": 0, "always": 0, "p": 1}.get(choice)
    if index is not None and index < len(scopes):
        return scopes[index][0]
    return "rejected"


class TerminalAsker:
    """Asks on the terminal's input line while the agent waits mid-turn."""

    def __init__(self, ask: Callable[[str], Awaitable[str]], write: Callable[[str], None]) -> None:
        self._ask = ask
        self._write = write

    async def __call__(self, request: ApprovalRequest) -> Answer:
        self._write(describe(request) + "\n")
        answer = parse_answer(await self._ask(question(request)), request)
        if isinstance(answer, Always):
            shown_answer = f"allowed in this project {shown(str(answer.rule))}"
        elif isinstance(answer, Rule):
            shown_answer = f"allowed-session {shown(str(answer))}"
        else:
            shown_answer = answer
        self._write(f"  → {shown_answer}\n")
        return answer


def install(ctx: Context, ask: Callable[[str], Awaitable[str]], write: Callable[[str], None]) -> Callable[[], None]:
    """Install the terminal asker on the approval service when approvals are mounted."""
    approval = ctx.get(APPROVAL)
    if approval is None:
        return lambda: None
    remove: Callable[[], None] = approval.set_asker(TerminalAsker(ask, write))
    return remove
