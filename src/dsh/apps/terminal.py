"""Terminal mode of the stdio app: line editing, history, colour, and a live waiting indicator.

The prompt (prompt_toolkit, with history) is active only while the agent is idle; during a turn
the transcript streams straight to the terminal, so partial lines are never overdrawn. From
``step/start`` until the first token a one-line spinner says "waiting for the model…". Each
time reading is printed as one dim line before the reply, so the user sees exactly what the model
was told. Ctrl-C during a turn cancels it (it ends ``aborted`` and the session stays consistent;
the terminal is in cooked mode then, so Ctrl-C arrives as SIGINT and the CLI's handler cancels);
Ctrl-C at the idle prompt, or Ctrl-D, flushes and leaves.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from prompt_toolkit import PromptSession
from prompt_toolkit.history import FileHistory, InMemoryHistory
from rich.console import Console
from rich.markup import escape

from dsh.apps.escape import escape_controls
from dsh.session import Event, Session

if TYPE_CHECKING:
    from dsh.apps.stdio import StdioApp

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
CLEAR_LINE = "\r\x1b[K"


class _Spinner:
    """A one-line "waiting for the model…" indicator, erased before the first token."""

    def __init__(self, write: _Writer) -> None:
        self._write = write
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._spin())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
            self._write(CLEAR_LINE)

    async def _spin(self) -> None:
        started = time.monotonic()
        frame = 0
        while True:
            waited = int(time.monotonic() - started)
            self._write(f"{CLEAR_LINE}\x1b[2m{SPINNER[frame % len(SPINNER)]} waiting for the model… {waited}s (Ctrl-C cancels)\x1b[0m")
            frame += 1
            await asyncio.sleep(0.1)


class _Writer:
    def __init__(self, stdout: TextIO) -> None:
        self._stdout = stdout

    def __call__(self, text: str) -> None:
        self._stdout.write(text)
        self._stdout.flush()


def _history(app: StdioApp) -> FileHistory | InMemoryHistory:
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


async def run_terminal(app: StdioApp, stdout: TextIO) -> None:
    from dsh.apps.stdio import DIM, RESET, Renderer

    write = _Writer(stdout)
    console = Console(file=stdout, highlight=False, soft_wrap=True)
    spinner = _Spinner(write)
    renderer = Renderer(app.ctx, write, colour=True, prompt="\n", sanitise=escape_controls)
    renderer.on_first_token = spinner.stop
    renderer.on_reading = lambda text: write(f"{DIM}⏱ {text.replace(chr(10), ' · ')}{RESET}\n")

    def on_event(session: Session, event: Event) -> None:
        if session is not app.agent.session:
            return
        if event.type == "step/start":
            spinner.start()
        elif event.type in ("step/end", "turn/end"):
            spinner.stop()
        if event.type == "turn/end" and event.data.get("reason", {}).get("kind") in ("aborted", "error"):
            reason = event.data["reason"]
            detail = reason.get("reason") or reason.get("message") or ""
            text = escape_controls(f"⊘ turn {reason['kind']}{': ' + str(detail) if detail else ''}")
            write(f"\n{DIM}{text}{RESET}")
        renderer(session, event)

    from dsh.apps.approval_prompt import install as install_asker

    remove_asker = install_asker(app.ctx, write)
    history = _history(app)
    prompt: PromptSession[str] = PromptSession(history=history)
    remove = app.ctx.on("session/event", on_event)
    console.print(f"[bold]{escape(app.config.welcome)}[/bold] [dim]session {escape(app.session_id)} · Ctrl-D to leave[/dim]")
    stop = asyncio.Event()
    app.set_stop_input(stop.set)
    try:
        while not stop.is_set():
            try:
                line = await prompt.prompt_async("> ", handle_sigint=False)
            except (KeyboardInterrupt, EOFError):
                break
            note = app.submit(line)
            if note:
                print(f"dsh: {escape_controls(note)}", file=sys.stderr)
            await app.settle()
    finally:
        spinner.stop()
        remove()
        await app.settle()
        remove_asker()
