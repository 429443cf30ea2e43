"""Slash commands of terminal mode, and their completion.

``/help``, ``/exit`` (``/quit``), ``/compact``, ``/model NAME``, ``/clear``, ``/resume [N|ID]``,
``/usage``, ``/hooks``, ``/skills``, ``/rewind`` (:mod:`dsh.apps.term.rewind_command`),
``/permissions [rm N]``. An unknown ``/x`` is an error line and never reaches the model; a line starting with
``//`` is sent with one slash removed.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable
from typing import Any, Protocol

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from dsh.apps.escape import escape_controls
from dsh.apps.term.host import TerminalApp
from dsh.apps.term.view import usage_line
from dsh.llm import catalog
from dsh.llm.service import LLM
from dsh.observability.cost import events_cost

COMMANDS: dict[str, str] = {
    "/help": "this list",
    "/exit": "leave (also /quit, Ctrl-D, or Ctrl-C twice on an empty prompt)",
    "/quit": "leave",
    "/compact": "compact the history now (needs the compact plugin)",
    "/model": "/model NAME: switch the model for the next requests (logged as a request/header change)",
    "/clear": "start a new session (the current one stays stored)",
    "/resume": "/resume: list this folder's sessions; /resume N or ID: switch to one",
    "/usage": "tokens in, out and cached, and their cost, over this session",
    "/rewind": "/rewind: list the turns; /rewind N: restore files and/or conversation to before turn N",
    "/hooks": "the hooks in force and the file each came from",
    "/skills": "the skills the model can load, and where each came from",
    "/permissions": "/permissions: the rules in force and their sources; /permissions rm N: remove one",
}


class UI(Protocol):
    """What the commands need from the terminal front end."""

    app: TerminalApp
    recent: list[str]

    def say(self, text: str) -> None: ...
    def error(self, text: str) -> None: ...
    def leave(self) -> None: ...
    def show_history(self) -> None: ...
    async def ask(self, question: str) -> str: ...


class SlashCompleter(Completer):
    """Completes command names, ``/model`` names and ``/resume`` session ids."""

    def __init__(self, ui: UI) -> None:
        self._ui = ui

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/"):
            return
        if " " not in text:
            for name, help_text in COMMANDS.items():
                if name.startswith(text):
                    yield Completion(name, start_position=-len(text), display_meta=help_text.split(":")[0])
            return
        command, _, arg = text.partition(" ")
        if command == "/model":
            # What is served here first, then the catalog's provider:model names.
            served = list(self._ui.app.ctx.require(LLM).models())
            options: list[str] = served + [n for n in catalog.names() if n not in served]
        elif command == "/resume":
            options = list(self._ui.recent)
        else:
            return
        for option in options:
            if option.startswith(arg):
                yield Completion(option, start_position=-len(arg))


def _when(ms: int | None) -> str:
    if ms is None:
        return "?"
    return datetime.datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M %Z")


async def run(ui: UI, line: str) -> None:
    """Run one slash command line."""
    command, _, arg = line.strip().partition(" ")
    arg = arg.strip()
    app = ui.app
    if command == "/help":
        for name, text in COMMANDS.items():
            if name != "/quit":
                ui.say(f"  {name:<9} {text}")
        ui.say("  //text    send a line that starts with /")
    elif command in ("/exit", "/quit"):
        ui.leave()
    elif command == "/compact":
        note = app.submit("/compact")
        if note:
            ui.error(note)
        else:
            ui.say("compacting…")
    elif command == "/model":
        if not arg:
            ui.say(f"model: {app.agent.options.model} (served here: {', '.join(app.ctx.require(LLM).models())})")
            return
        problem = await app.serve_model(arg) or app.switch_model(arg)
        if problem:
            ui.error(problem)
        else:
            ui.say(f"model: {arg} from the next request")
            note = catalog.unknown_note(arg)
            if note:
                ui.say(note)
    elif command == "/clear":
        old = app.session_id
        await app.new_session()
        ui.say(f"new session {app.session_id} (previous: dsh chat --resume {old})")
    elif command == "/resume":
        await _resume(ui, arg)
    elif command == "/usage":
        _usage(ui)
    elif command == "/rewind":
        from dsh.apps.term.rewind_command import rewind

        await rewind(ui, arg)
    elif command in ("/hooks", "/skills"):
        from dsh.apps.extensions_view import listing

        for text in listing(app.ctx, command[1:], app.agent):
            ui.say(f"  {escape_controls(text)}")
    elif command == "/permissions":
        from dsh.apps.term import permissions_cmd

        permissions_cmd.run(ui, arg)
    else:
        ui.error(f"unknown command {escape_controls(command)} (try /help; start a line with // to send it as text)")


async def _resume(ui: UI, arg: str) -> None:
    app = ui.app
    sessions = await app.folder_sessions()
    ui.recent = [info.id for info in sessions]
    if not arg:
        if not sessions:
            ui.say(f"no other stored session for this folder ({os.getcwd()})")
            return
        for number, info in enumerate(sessions[:20], 1):
            ui.say(f"  {number:>2}  {info.id}  {_when(info.modified_ms or info.created_at)}")
        ui.say("resume one with /resume N or /resume ID (Tab completes)")
        return
    target: str | None = None
    if arg.isdigit() and 1 <= int(arg) <= len(sessions):
        target = sessions[int(arg) - 1].id
    else:
        matches = [i.id for i in sessions if i.id.startswith(arg)]
        if len(matches) == 1:
            target = matches[0]
        elif len(matches) > 1:
            ui.error(f'"{escape_controls(arg)}" matches {len(matches)} sessions; type more of the id')
            return
    if target is None:
        ui.error(f'no session "{escape_controls(arg)}" in this folder (/resume lists them)')
        return
    old = app.session_id
    try:
        await app.resume_session(target)
    except Exception as exc:
        ui.error(f"cannot resume {target}: {escape_controls(str(exc))}")
        return
    ui.say(f"resumed {target} (previous: dsh chat --resume {old})")
    ui.show_history()


def _usage(ui: UI) -> None:
    session = ui.app.agent.session
    usages: list[dict[str, Any]] = []
    for event in session.events:
        if event.type == "assistant/message" and isinstance(event.data.get("usage"), dict):
            usages.append(event.data["usage"])
    model = ui.app.agent.options.model
    line = usage_line(model, session.last_turn, usages, None, events_cost(session.events, model))
    ui.say(f"session {session.id}: {len(usages)} model calls · " + line.replace(f"turn {session.last_turn}", f"{session.last_turn} turns"))
