"""dsh approval requests as ACP ``session/request_permission`` calls to the client.

:class:`ClientAsker` is an approval asker (the interface ``APPROVAL``'s ``set_asker`` takes): it
puts each request to the client of the request's session with four options, allow once
(``allowed-once``), allow always (``allowed-session``: a session allow rule of the narrowest
scope of the call: the exact command, the exact path, or the tool), reject (``rejected``) and
reject always (``rejected`` and a session deny rule of the same scope, logged as ``scope`` and
folded back on resume). Rules from flags and settings files decide before the client is asked. It fails closed: a client that answers ``cancelled`` gives ``cancelled``; an
error response, a lost connection, an unknown option or no answer within ``timeout`` seconds gives
``unavailable``; a turn cancelled while the question is open gives ``cancelled`` at once. In every
refused case the tool does not run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from acp import schema

from dsh.apps.acp.mapping import tool_call_content, tool_kind, tool_title
from dsh.plugins.subagent.lineage import delegation_root, label_of
from dsh.tools.workspace.approval import Always, Answer, ApprovalOutcome, ApprovalRequest

__all__ = ["OPTIONS", "ClientAsker"]

log = logging.getLogger("dsh.acp")

OPTIONS = [
    schema.PermissionOption(option_id="allow-once", name="Allow once", kind="allow_once"),
    schema.PermissionOption(option_id="allow-always", name="Allow always", kind="allow_always"),
    schema.PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
    schema.PermissionOption(option_id="reject-always", name="Reject always", kind="reject_always"),
]
_OUTCOMES: dict[str, ApprovalOutcome] = {
    "allow-once": "allowed-once",
    "allow-always": "allowed-session",
    "reject": "rejected",
}


def _answer(option_id: str, request: ApprovalRequest) -> Answer:
    """The client's option as an answer: allow always is a session allow rule, reject always a
    session deny rule, each of the narrowest scope (the exact command or path, or the tool)."""
    if option_id == "reject-always":
        return Always(request.scopes[0][0], deny=True) if request.scopes else "rejected"
    return _OUTCOMES.get(option_id, "unavailable")


class _Requester(Protocol):
    async def request_permission(
        self, session_id: str, tool_call: schema.ToolCallUpdate, options: list[schema.PermissionOption], **kwargs: object
    ) -> schema.RequestPermissionResponse: ...


class ClientAsker:
    """Asks the ACP client; ``session_of`` maps a request's agent to its ACP session id."""

    def __init__(
        self,
        client: _Requester,
        session_of: Callable[[object], tuple[str, str | None] | None],
        *,
        timeout: float,
    ) -> None:
        self._client = client
        self._session_of = session_of
        self.timeout = timeout

    async def __call__(self, request: ApprovalRequest) -> Answer:
        # A subagent's question is asked in the session of the agent it works for, on that
        # agent's subagent call, labelled with the child's name.
        root, root_call = delegation_root(request.agent)
        found = self._session_of(root)
        if found is None:
            return "unavailable"
        session_id, cwd = found
        args = request.arguments
        name = str(request.tool_name)
        label = label_of(request.agent)
        title = f"{tool_title(name, args)} — {request.reason}" if request.reason else tool_title(name, args)
        tool_call = schema.ToolCallUpdate(
            tool_call_id=str(root_call or request.call_id or f"approval-{name}"),
            title=f"[{label}] {title}" if label else title,
            kind=tool_kind(name),
            status="pending",
            raw_input=args,
            content=tool_call_content(name, args, cwd) or None,
        )
        ask = asyncio.ensure_future(self._client.request_permission(session_id, tool_call, list(OPTIONS)))
        aborted = asyncio.get_running_loop().create_future()
        remove: Callable[[], None] | None = None
        signal = request.signal
        if signal is not None:
            if signal.aborted:
                ask.cancel()
                return "cancelled"

            def on_abort() -> None:
                if not aborted.done():
                    aborted.set_result(None)

            remove = signal.add_listener(on_abort)
        try:
            done, _ = await asyncio.wait({ask, aborted}, timeout=self.timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if remove is not None:
                remove()
        if ask not in done:
            ask.cancel()
            if aborted in done:
                return "cancelled"
            log.warning("acp: no answer to the permission request for %s within %gs; refused", name, self.timeout)
            return "unavailable"
        aborted.cancel()
        try:
            response = ask.result()
        except Exception as exc:
            log.warning("acp: the permission request for %s failed (%s); refused", name, exc)
            return "unavailable"
        outcome = response.outcome
        if isinstance(outcome, schema.AllowedOutcome):
            return _answer(outcome.option_id, request)
        return "cancelled"
