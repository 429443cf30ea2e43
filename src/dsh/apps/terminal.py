"""Terminal mode of the stdio app: line editing, history, colour, and a live status line.

The prompt stays active at the bottom while the agent streams above it (``patch_stdout``), so a
line typed during a turn steers it. The bottom toolbar shows "waiting for the model…" with a
spinner from ``step/start`` until the first token. Each time reading is printed as one dim line
before the reply, so the user sees exactly what the model was told. Ctrl-C during a turn cancels
the turn (it ends ``aborted`` and the session stays consistent); Ctrl-C at an idle prompt, or
Ctrl-D, flushes and leaves.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from prompt_toolkit import PromptSession
from prompt_toolkit.formatted_text import HTML
from prompt_toolkit.history import FileHistory, InMemoryHistory
from prompt_toolkit.patch_stdout import patch_stdout
from rich.console import Console
from rich.markup import escape

from dsh.session import Event, Session

if TYPE_CHECKING:
    from dsh.apps.stdio import StdioApp

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


async def run_terminal(app: StdioApp, stdout: TextIO) -> None:
    from dsh.apps.stdio import DIM, RESET, Renderer

    console = Console(file=stdout, highlight=False, soft_wrap=True)
    waiting_since: list[float] = []

    def write(text: str) -> None:
        stdout.write(text)
        stdout.flush()

    renderer = Renderer(app.ctx, write, colour=True, prompt="\n")

    def first_token() -> None:
        waiting_since.clear()

    def show_reading(text: str) -> None:
        write(f"{DIM}⏱ {text.replace(chr(10), ' · ')}{RESET}\n")

    renderer.on_first_token = first_token
    renderer.on_reading = show_reading

    def on_event(session: Session, event: Event) -> None:
        if event.type == "step/start":
            waiting_since[:] = [time.monotonic()]
        renderer(session, event)

    def toolbar() -> HTML | str:
        if waiting_since:
            frame = SPINNER[int(time.monotonic() * 10) % len(SPINNER)]
            seconds = int(time.monotonic() - waiting_since[0])
            return HTML(f"<b>{frame}</b> waiting for the model… {seconds}s  <i>(Ctrl-C cancels)</i>")
        if app.agent.status == "running":
            return HTML("<i>running… type to steer, Ctrl-C cancels</i>")
        return ""

    history_path = app.config.history_file
    history = FileHistory(str(Path(history_path).expanduser())) if history_path else InMemoryHistory()
    prompt: PromptSession[str] = PromptSession(history=history, bottom_toolbar=toolbar, refresh_interval=0.1)
    remove = app.ctx.on("session/event", on_event)
    console.print(f"[bold]{escape(app.config.welcome)}[/bold] [dim]session {escape(app.session_id)}[/dim]")
    try:
        with patch_stdout(raw=True):
            while True:
                try:
                    line = await prompt.prompt_async("> ")
                except KeyboardInterrupt:
                    if app.agent.status == "running" or app.agent.queued:
                        app.agent.cancel("interrupted by the user")
                        continue
                    break
                except EOFError:
                    break
                note = app.submit(line)
                if note:
                    print(f"dsh: {note}", file=sys.stderr)
        await app.settle()
    finally:
        remove()
        await asyncio.sleep(0)
