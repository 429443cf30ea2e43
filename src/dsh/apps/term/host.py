"""What terminal mode needs from the app that runs it, as protocols.

``dsh.apps.stdio.StdioApp`` provides :class:`TerminalApp` and imports the terminal front end;
the front end and its commands name the app only through this module, so neither imports the
app that imports it (the import graph stays acyclic).

:class:`Asking` is the one thing a running front end offers plugins: ``await ask(question)``
puts one question on the input line and returns the answer (``""`` for Ctrl-C).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dsh.agent.agent import Agent
    from dsh.persistence.base import SessionInfo
    from dsh.runtime import Context


class Asking(Protocol):
    async def ask(self, question: str) -> str: ...


class AppConfig(Protocol):
    @property
    def history_file(self) -> str | None: ...
    @property
    def persistence_root(self) -> str: ...
    @property
    def welcome(self) -> str: ...


class TerminalApp(Protocol):
    """The app as terminal mode and its slash commands use it."""

    # The running front end, for plugins that ask (set while terminal mode runs).
    terminal: Asking | None

    @property
    def ctx(self) -> Context: ...
    @property
    def config(self) -> AppConfig: ...
    @property
    def agent(self) -> Agent: ...
    @property
    def session_id(self) -> str: ...

    def submit(self, line: str) -> str | None: ...
    def set_stop_input(self, callback: Callable[[], None]) -> None: ...
    async def settle(self) -> None: ...
    def switch_model(self, model: str) -> str | None: ...
    async def serve_model(self, model: str) -> str | None: ...
    async def new_session(self) -> None: ...
    async def resume_session(self, session_id: str) -> None: ...
    async def folder_sessions(self) -> list[SessionInfo]: ...
