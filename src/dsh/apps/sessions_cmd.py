"""``dsh sessions ACTION``: open the store the flags select, resolve the id, run the action.

Owns the dispatch only: ``list``, ``show``, ``requests``, ``rm`` (``delete``) and ``export`` are
:mod:`dsh.apps.sessions`'s, ``import`` and ``salvage`` :mod:`dsh.apps.salvage`'s, ``diff``, ``rewind`` and ``gc``
:mod:`dsh.apps.rewind_cmd`'s. The store is
closed whatever happens.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Mapping

from dsh.apps import rewind_cmd, salvage, session_ids, sessions
from dsh.apps.entries import open_store
from dsh.errors import UsageError
from dsh.persistence.base import SessionStore

__all__ = ["ACTIONS", "run"]

Action = Callable[[SessionStore, argparse.Namespace], Awaitable[int]]


async def _trace(store: SessionStore, args: argparse.Namespace) -> int:
    from dsh.observability.replay import trace_command  # OpenTelemetry only for this action

    return await trace_command(store, args)


# Every action but ``import``, which writes a new session rather than reading one.
ACTIONS: Mapping[str, Action] = {
    "list": sessions.list_sessions,
    "show": sessions.show,
    "requests": sessions.requests,
    "rm": sessions.remove,
    "delete": sessions.remove,
    "export": sessions.export,
    "salvage": salvage.salvage,
    "trace": _trace,
    **rewind_cmd.ACTIONS,
}


async def run(args: argparse.Namespace) -> int:
    if args.action == "import":
        return await salvage.import_file(args, open_store)
    action = ACTIONS.get(args.action)
    if action is None:
        raise UsageError(f"unknown sessions action {args.action}")
    store, ctx = await open_store(args)
    try:
        if getattr(args, "id", None):
            args.id = await session_ids.resolve(store, args.id)
        return await action(store, args)
    finally:
        await ctx.dispose()
