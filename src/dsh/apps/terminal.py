"""Terminal mode of the stdio app: the reply streams above a persistent input line.

One prompt_toolkit application owns the bottom of the screen: the unfinished part of the reply
(live), a status line (spinner, hints) and the input line, with slash-command completion. All
finished output (Markdown blocks, tool calls, time readings, errors, the per-turn usage line) is
written *above* it through prompt_toolkit's stdout proxy, one whole line at a time, so typing
while a reply streams never mixes with it and history is never redrawn.

- Enter while a turn runs steers it (``↪``), as plain mode does; when idle it starts a turn.
- Ctrl-C during a turn cancels it (``aborted``; the session stays consistent). At the prompt it
  clears a draft; a second Ctrl-C on an empty prompt leaves, as does Ctrl-D or ``/exit``.
- Slash commands are in :mod:`dsh.apps.term.commands`; what events print is
  :mod:`dsh.apps.term.view`.
- Errors are shown once, as the turn's ``⊘`` line: the loop's own warning for a failed turn is
  dropped here (plain mode prints it on stderr).
- ``NO_COLOR`` drops colour, nothing else. Resuming shows the last turns; leaving prints
  ``resume with: dsh chat --resume <id>``.

:meth:`TerminalUI.ask` lets a plugin ask the user one question on the input line while the
application runs; the inline approval prompt (:mod:`dsh.apps.approval_prompt`) asks through it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from prompt_toolkit.application import Application
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import ANSI, StyleAndTextTuples
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.layout import ConditionalContainer, HSplit, Layout, Window
from prompt_toolkit.layout.controls import BufferControl, FormattedTextControl
from prompt_toolkit.layout.dimension import Dimension
from prompt_toolkit.layout.menus import CompletionsMenu
from prompt_toolkit.layout.processors import BeforeInput
from prompt_toolkit.output import ColorDepth
from prompt_toolkit.patch_stdout import StdoutProxy

from dsh.apps.approval_prompt import install as install_asker
from dsh.apps.escape import escape_controls
from dsh.apps.term import commands
from dsh.apps.term.host import TerminalApp
from dsh.apps.term.view import Style, TranscriptView, replay
from dsh.llm.catalog import unknown_note
from dsh.plugins.subagent.progress import child_activity
from dsh.session import Event, Session

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
LIVE_LINES = 12  # the unfinished block shown below the transcript, at most this many lines
CANCELLED = "interrupted by the user"


def _history(app: TerminalApp) -> History:
    """Prompt history: ``historyFile``, else ``<persistenceRoot>/history`` (per project), 0600."""
    configured = app.config.history_file
    path = Path(configured or Path(app.config.persistence_root) / "history").expanduser()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        os.chmod(path, 0o600)
    except OSError:
        return InMemoryHistory()  # an unwritable folder must not keep the app from starting
    return FileHistory(str(path))


class _ShownAsTurnEnd(logging.Filter):
    """Drops the loop's warnings for a failed turn: the turn's ``⊘`` line says it once."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "dsh.agent":
            return True
        message = str(record.msg)
        if message.startswith('agent "%s": turn %s') and "failed" in message:
            return False
        args = record.args if isinstance(record.args, tuple) else ()
        return not (len(args) == 2 and getattr(args[1], "code", None) == "MAX_STEPS")


class TerminalUI:
    """The running terminal front end of one :class:`StdioApp`."""

    def __init__(self, app: TerminalApp) -> None:
        self.app = app
        self.colour = not os.environ.get("NO_COLOR")
        self.style = Style(self.colour)
        self.recent: list[str] = []  # session ids /resume offers
        self._armed = False  # a Ctrl-C on an empty prompt; the next one leaves
        self._question: asyncio.Future[str] | None = None
        self._question_text = ""
        self._leaving = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._out: StdoutProxy | None = None
        self.buffer = Buffer(
            multiline=False,
            history=_history(app),
            completer=commands.SlashCompleter(self),
            complete_while_typing=True,
            accept_handler=self._accept,
        )
        self.buffer.on_text_changed += self._disarm
        self.view = TranscriptView(self._write, self.style, self._width)
        self.application: Application[None] = Application(
            layout=Layout(self._container(), focused_element=self.buffer),
            key_bindings=self._bindings(),
            full_screen=False,
            erase_when_done=True,
            color_depth=None if self.colour else ColorDepth.DEPTH_1_BIT,
        )

    # -- output ------------------------------------------------------------------------------

    def _write(self, text: str) -> None:
        out = self._out
        if out is not None and not out.closed:
            out.write(text)
            out.flush()
        else:
            sys.stdout.write(text)
            sys.stdout.flush()

    def _width(self) -> int:
        try:
            return self.application.output.get_size().columns
        except Exception:
            return 80

    def say(self, text: str) -> None:
        self._write(self.style.dim(escape_controls(text)) + "\n")

    def error(self, text: str) -> None:
        self._write(self.style.red("✗ " + escape_controls(text)) + "\n")

    def show_history(self) -> None:
        replay(self.app.agent.session.events, self.view)

    # -- layout ------------------------------------------------------------------------------

    def _busy(self) -> bool:
        agent = self.app.agent
        return agent.status == "running" or bool(agent.queued)

    def _live(self) -> StyleAndTextTuples:
        text = escape_controls(self.view.live)
        lines = text.split("\n")[-LIVE_LINES:]
        body = "\n".join(lines)
        return ANSI(self.style.dim(body) if self.view.live_is_reasoning else body).__pt_formatted_text__()

    def _status(self) -> StyleAndTextTuples:
        frame = SPINNER[int(time.monotonic() * 10) % len(SPINNER)]
        if self._question is not None:
            text = self.style.bold(escape_controls(self._question_text))
        elif self.view.children:
            text = self.style.dim(f"{frame} {self.view.children_status()} · Ctrl-C cancels")
        elif self.view.waiting:
            waited = int(time.monotonic() - self.view.waiting_since)
            text = self.style.dim(f"{frame} waiting for the model… {waited}s · Ctrl-C cancels")
        elif self._busy():
            text = self.style.dim(f"{frame} working · Enter steers the turn · Ctrl-C cancels")
        elif self._armed:
            text = self.style.dim("press Ctrl-C again to exit")
        else:
            text = self.style.dim("/help for commands · Ctrl-D or /exit to leave")
        return ANSI(text).__pt_formatted_text__()

    def _prompt(self) -> StyleAndTextTuples:
        if self._question is not None:
            return [("bold", "? ")]
        return [("", "↪ ")] if self._busy() else [("bold", "> ")]

    def _container(self) -> HSplit:
        has_live = Condition(lambda: bool(self.view.live.strip()))
        return HSplit([
            ConditionalContainer(
                Window(FormattedTextControl(self._live), wrap_lines=True, dont_extend_height=True),
                filter=has_live,
            ),
            Window(FormattedTextControl(self._status), height=1, dont_extend_height=True),
            Window(
                BufferControl(self.buffer, input_processors=[BeforeInput(self._prompt)]),
                height=Dimension(min=1, max=8),
                wrap_lines=True,
                dont_extend_height=True,
            ),
            CompletionsMenu(max_height=8),
        ])

    def _bindings(self) -> KeyBindings:
        bindings = KeyBindings()

        @bindings.add("c-c", eager=True)
        def _ctrl_c(event: KeyPressEvent) -> None:
            if self._question is not None:
                self._answer("")
            elif self._busy():
                self.app.agent.cancel(CANCELLED)
            elif self.buffer.text:
                self.buffer.reset()
                self._armed = True
            elif self._armed:
                self.leave()
            else:
                self._armed = True

        @bindings.add("c-d", filter=Condition(lambda: not self.buffer.text))
        def _ctrl_d(event: KeyPressEvent) -> None:
            self.leave()

        return bindings

    def _disarm(self, _buffer: Buffer) -> None:
        self._armed = False

    # -- input -------------------------------------------------------------------------------

    def _accept(self, buffer: Buffer) -> bool:
        line = buffer.text
        if self._question is not None:
            self._answer(line)
            return False
        self._armed = False
        text = line.strip()
        if not text:
            return False
        if text.startswith("/") and not text.startswith("//"):
            self._spawn(commands.run(self, text))
            return False
        if text.startswith("//"):
            text = text[1:]
        if self._busy():
            self._write(self.style.cyan("↪ " + escape_controls(text)) + self.style.dim("  (steers the running turn)") + "\n")
        else:
            self._write("\n" + self.style.bold("> " + escape_controls(text)) + "\n")
        note = self.app.submit(text)
        if note:
            self.error(note)
        return False

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._tasks.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:
                self.error(str(finished.exception()))

        task.add_done_callback(done)

    async def ask(self, question: str) -> str:
        """Ask one question on the input line; returns the answer ("" for Ctrl-C, or when the
        application is not running: nobody can answer, so the caller's default applies)."""
        while self._question is not None:
            await asyncio.shield(self._question)
        if not self.application.is_running or self._leaving:
            return ""
        self._question = asyncio.get_running_loop().create_future()
        self._question_text = question
        self.application.invalidate()
        try:
            return await self._question
        finally:
            self._question = None

    def _answer(self, text: str) -> None:
        if self._question is not None and not self._question.done():
            self._question.set_result(text)

    def leave(self) -> None:
        self._leaving = True
        self._answer("")  # a pending question (an approval) is denied, never left waiting
        if self._busy():
            self.app.agent.cancel(CANCELLED)
        if self.application.is_running and not self.application.future.done():  # type: ignore[union-attr]
            self.application.exit()

    # -- the run -----------------------------------------------------------------------------

    def _on_event(self, session: Session, event: Event) -> None:
        if session is self.app.agent.session:
            self.view(event)
            self.application.invalidate()
            return
        activity = child_activity(self.app.ctx, session.id, event)
        if activity is not None and activity.root_session == self.app.agent.session.id:
            self.view.child(activity.call_id, activity.label, activity.what, activity.started, activity.done)
            self.application.invalidate()

    async def _tick(self) -> None:
        """Animates the spinner while a turn runs; an idle screen is not redrawn."""
        while True:
            await asyncio.sleep(0.1)
            if self._busy() or self.view.live:
                self.application.invalidate()

    async def run(self) -> None:
        app = self.app
        filter_ = _ShownAsTurnEnd()
        handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
        remove = app.ctx.on("session/event", self._on_event)
        saved = sys.stdout, sys.stderr
        self._out = StdoutProxy(sleep_between_writes=0.03, raw=True)
        streams: list[Any] = []
        for handler in handlers:
            handler.addFilter(filter_)
            streams.append(handler.setStream(self._out))
        sys.stdout = sys.stderr = self._out
        app.set_stop_input(self.leave)
        app.terminal = self  # plugins reach ask() through ctx.require(STDIO_APP).terminal
        remove_asker = install_asker(app.ctx, self.ask, self._write)
        self._write(
            self.style.bold(escape_controls(app.config.welcome))
            + self.style.dim(f" session {app.session_id} · /help for commands · Ctrl-D to leave")
            + "\n"
        )
        note = unknown_note(app.agent.options.model or "")
        if note:  # an unknown model runs on the catalog's defaults: say which, once
            self.say(note)
        if app.agent.session.last_turn:
            self.show_history()
        ticker = asyncio.get_running_loop().create_task(self._tick())
        try:
            await self.application.run_async()
            await app.settle()
            for task in list(self._tasks):
                task.cancel()
        finally:
            ticker.cancel()
            remove()
            remove_asker()
            app.terminal = None
            self._out.close()
            sys.stdout, sys.stderr = saved
            for handler, stream in zip(handlers, streams, strict=True):
                handler.setStream(stream)
                handler.removeFilter(filter_)
        if app.agent.session.last_turn:
            print(f"resume with: dsh chat --resume {escape_controls(app.session_id)}", file=saved[0], flush=True)


async def run_terminal(app: TerminalApp, stdout: TextIO) -> None:
    await TerminalUI(app).run()
