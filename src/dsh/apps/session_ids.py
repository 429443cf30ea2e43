"""Session ids as people type them: any unique prefix names a session.

A prefix matches an id that starts with it, or whose part after ``<agent>-session-`` does (so
``1d53`` finds ``main-session-1d5398c8-…``). An exact id always wins; no match passes the text
through (the store then says the session was not found); several matches are a usage error
that lists the candidates on one line.
"""

from __future__ import annotations

from collections.abc import Iterable

from dsh.persistence.base import SessionStore

MAX_LISTED = 6


class AmbiguousId(Exception):
    """More than one stored session starts with the given prefix (a usage error)."""


def match(text: str, ids: Iterable[str]) -> str:
    """The one id ``text`` names among ``ids`` (``text`` itself when none matches)."""
    known = list(ids)
    if text in known or not text:
        return text
    found = [i for i in known if i.startswith(text) or i.partition("-session-")[2].startswith(text)]
    if len(found) == 1:
        return found[0]
    if not found:
        return text
    shown = ", ".join(sorted(found)[:MAX_LISTED])
    more = f" and {len(found) - MAX_LISTED} more" if len(found) > MAX_LISTED else ""
    raise AmbiguousId(f'session id prefix "{text}" matches {len(found)} sessions: {shown}{more}; type more of it')


async def resolve(store: SessionStore, text: str) -> str:
    """The full id of the session ``text`` names in ``store`` (see :func:`match`)."""
    return match(text, (info.id for info in await store.list()))
