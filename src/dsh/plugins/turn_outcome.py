"""turn-outcome: tells the model, durably, that its previous turn did not finish.

When a turn ends ``aborted`` (cancelled by the user), ``error`` (a failed model call, a timeout,
too many steps), ``disposed`` or ``interrupted`` (a crash closed by repair), its prompt got no
complete answer. Without a word about it, the next request holds two user prompts in a row and
the model guesses. This plugin appends one ``context/message`` at the start of the next turn,
before its first prompt, saying what happened.

The decision is a pure function of the log: the latest ``turn/end`` before the new turn ended
badly, and no note of this plugin follows it. So it survives resume (a turn cancelled in an
earlier process is explained in the next one) and never repeats. Nothing is rewritten; a log
without failed turns is unchanged byte for byte.

No config. Mounted by ``stdio-app`` (``dsh chat``, plain and terminal mode).

What the model sees
-------------------
A user-role message ``<context source="plugin">`` … ``</context>`` before the new prompt, e.g.::

    The previous turn (turn 3) was cancelled by the user (interrupted by the user) before it
    finished; its reply above, if any, is incomplete.

or ``The previous turn (turn 5) failed at step 1 with error TIMEOUT: <message>; …``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from dsh._redact import redact_urls
from dsh.agent.hooks import PROMPT_SUBMIT, JsonMap, PromptSubmit
from dsh.runtime import Context, ServiceKey
from dsh.session import Event, Session
from dsh.session.vocab import JsonObject

name = "turn-outcome"
inject = ["agents"]

SOURCE: Final = {"kind": "plugin", "plugin": "turn-outcome"}
BAD_ENDINGS: Final = frozenset({"aborted", "error", "disposed", "interrupted"})
MAX_MESSAGE: Final = 300  # an error text can quote a whole server response


def _is_note(event: Event) -> bool:
    if event.type != "context/message" or type(event.data) is not dict:
        return False
    source = event.data.get("source")
    return type(source) is dict and source.get("kind") == "plugin" and source.get("plugin") == "turn-outcome"


def unexplained_ending(session: Session) -> Event | None:
    """The ``turn/end`` of the latest finished turn when it ended badly and no note follows it."""
    for event in reversed(session.events):
        if _is_note(event):
            return None
        if event.type == "turn/end":
            reason = event.data.get("reason") if type(event.data) is dict else None
            kind = reason.get("kind") if type(reason) is dict else None
            return event if kind in BAD_ENDINGS else None
    return None


def describe(ending: Event) -> str:
    """The note's text for one bad ``turn/end``."""
    data = ending.data
    reason: JsonObject = data.get("reason") or {}
    kind = reason.get("kind")
    turn = f"The previous turn (turn {data.get('turn')})"
    tail = "; its reply above, if any, is incomplete."
    if kind == "aborted":
        why = reason.get("reason")
        return f"{turn} was cancelled by the user{f' ({why})' if why else ''} before it finished{tail}"
    if kind == "error":
        code = reason.get("code")
        # Redacted again here: a log written before the error text was redacted may hold one.
        message = redact_urls(str(reason.get("message") or ""))
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 1] + "…"
        step = reason.get("step")
        where = f" at step {step}" if isinstance(step, int) and step > 0 else ""
        what = f"{code}: {message}" if code else message
        return f"{turn} failed{where} with error {what}{tail}"
    if kind == "disposed":
        return f"{turn} was stopped because the app closed before it finished{tail}"
    return f"{turn} was interrupted by a crash before it finished{tail}"


TURN_OUTCOME: ServiceKey[Callable[[Event], str]] = ServiceKey("turn_outcome")


def apply(ctx: Context, config: object = None) -> None:
    async def on_prompt(submit: PromptSubmit, next_: Callable[[], Awaitable[JsonMap]]) -> JsonMap:
        agent = submit.agent
        if agent.session.open_turn is not None:
            ending = unexplained_ending(agent.session)
            if ending is not None:
                # The turn is open, so this appends right away: before the prompt it explains.
                agent.inject([{"type": "text", "text": describe(ending)}], source=SOURCE)
        return await next_()

    ctx.on(PROMPT_SUBMIT, on_prompt, prepend=True)
    ctx.provide(TURN_OUTCOME, describe)  # so a host mounts it only once
