"""``/rewind`` in terminal mode: list the turns, then restore files, the conversation, or both.

``/rewind`` lists each turn (number, time, prompt, files changed) and how to go on;
``/rewind N`` asks what to do (files, conversation, both); ``/rewind N files|conversation|both
[force]`` does it at once. Files are restored in place and a ``workspace/rewind`` event is
appended to this session (the terminal holds its writer lock); the conversation is forked into a
new session before turn N and the terminal switches to it (the original stays stored).
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any, Protocol

from dsh.agent.sessions import SESSIONS
from dsh.apps.escape import escape_controls
from dsh.apps.term.host import TerminalApp
from dsh.apps.term.view import changes_line
from dsh.persistence.base import SESSION_STORE
from dsh.rewind import ops
from dsh.rewind.history import REWIND
from dsh.session import Session

__all__ = ["rewind"]

CHOICES = {"f": "files", "files": "files", "c": "conversation", "conversation": "conversation",
           "b": "both", "both": "both"}


class UI(Protocol):
    app: TerminalApp

    def say(self, text: str) -> None: ...
    def error(self, text: str) -> None: ...
    def show_history(self) -> None: ...
    async def ask(self, question: str) -> str: ...


def _clock(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).astimezone().strftime("%H:%M")


async def _list(ui: UI) -> None:
    agent = ui.app.agent
    changes = await asyncio.to_thread(ops.turn_changes, agent.session.header, list(agent.session.events))
    if not changes:
        ui.say("no turns yet")
        return
    for change in changes:
        files = changes_line({"files": change.files, "added": change.added, "deleted": change.deleted})
        summary = files.split(" · ")[0] if files else "no files changed"
        prompt = escape_controls(change.prompt)
        prompt = prompt if len(prompt) <= 50 else prompt[:49] + "…"
        ui.say(f"  {change.turn:>3}  {_clock(change.time)}  {prompt:<50}  {summary}")
    ui.say("/rewind N: go back to before turn N (files, conversation or both)")


async def rewind(ui: UI, arg: str) -> None:
    app = ui.app
    words = arg.split()
    if not words:
        await _list(ui)
        return
    if not words[0].isdigit() or int(words[0]) < 1:
        ui.error("usage: /rewind [N [files|conversation|both] [force]]")
        return
    if app.agent.status == "running":
        ui.error("a turn is running: /rewind when it has finished (Ctrl-C cancels it)")
        return
    turn = int(words[0])
    force = "force" in words[1:]
    choice = next((CHOICES[w] for w in words[1:] if w in CHOICES), None)
    if choice is None:
        answer = await ui.ask(f"rewind to before turn {turn}: restore (f)iles, (c)onversation, (b)oth? ")
        choice = CHOICES.get(answer.strip().lower())
        if choice is None:
            ui.say("rewind cancelled")
            return
    try:
        await _do(ui, turn, choice, force)
    except ops.Conflict as exc:
        ui.error(str(exc).replace("--force", "/rewind N … force"))
    except Exception as exc:
        ui.error(f"cannot rewind: {escape_controls(str(exc))}")


async def _do(ui: UI, turn: int, choice: str, force: bool) -> None:
    app = ui.app
    session = app.agent.session
    header, events = dict(session.header), list(session.events)
    data: dict[str, Any] | None = None
    if choice in ("files", "both"):
        data = await asyncio.to_thread(ops.restore_files, header, events, turn, force=force)
        restored, total = (data["restored"], ops.restored_count(data)) if data else ([], 0)
        more = f" and {total - 8} more" if total > 8 else ""
        ui.say(f"restored {total} file{'s' if total != 1 else ''} to before turn {turn}"
               + (": " + escape_controls(", ".join(restored[:8])) + more if restored else ""))
    if choice == "files":
        if data is not None:
            session.append(REWIND, data)
            await app.ctx.require(SESSIONS).flush(session)
        return
    new_header, kept = ops.fork_events(header, events, turn)
    new_id = str(new_header["id"])
    if data is not None:
        kept = [*kept, Session.restore(new_id, kept, header=new_header).append(REWIND, data)]
    old = app.session_id
    if not kept:  # before turn 1 the conversation is empty: a fresh session is that
        await app.new_session()
        ui.say(f"new session {app.session_id}: the conversation before turn {turn} (previous: dsh chat --resume {old})")
        return
    store = app.ctx.require(SESSION_STORE)
    await store.create(new_header)
    try:
        await store.append(new_id, kept)
    finally:
        await store.release(new_id)
    await asyncio.to_thread(ops.keep_for, new_header, new_id, kept)
    await app.resume_session(new_id)
    ui.say(f"new session {new_id}: the conversation before turn {turn} (previous: dsh chat --resume {old})")
    ui.show_history()
