"""Delegation in ``dsh sessions``: children listed under their parent, the links ``show``
prints, and ``show --tree``.

A child session is recognised by its header (``parentSession`` with ``seedLength: 0``) and
described by its first event (``subagent/link``: the parent's call id, the depth, the agent's
name and the call's description); see :mod:`dsh.plugins.subagent.lineage`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.apps.escape import escape_controls
from dsh.persistence.base import SessionInfo, SessionStore, StoredSession, StoreError
from dsh.plugins.subagent.lineage import is_child_header, link_of

__all__ = ["link_lines", "nest", "tree_lines"]


def nest(rows: list[dict[str, Any]], infos: list[SessionInfo]) -> list[dict[str, Any]]:
    """``rows`` with each child right after its parent (depth first), its id shown indented;
    a child whose parent is not listed stays where it was."""
    parent_of = {i.id: i.header.get("parentSession") for i in infos if is_child_header(i.header)}
    by_id = {row["id"]: row for row in rows}
    kids: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        parent = parent_of.get(row["id"])
        row["parentSession"] = parent
        if isinstance(parent, str) and parent in by_id:
            kids.setdefault(parent, []).append(row)
    out: list[dict[str, Any]] = []

    def visit(row: dict[str, Any], depth: int) -> None:
        row["depth"] = depth
        out.append(row)
        for kid in sorted(kids.get(row["id"], []), key=lambda r: r["createdAt"]):
            visit(kid, depth + 1)

    for row in rows:
        if row["parentSession"] not in by_id:
            visit(row, 0)
    return out


def shown_id(row: Mapping[str, Any]) -> str:
    depth = int(row.get("depth") or 0)
    return ("  " * (depth - 1) + "└ " if depth else "") + str(row["id"])


def _children(infos: list[SessionInfo], parent: str) -> list[SessionInfo]:
    found = [i for i in infos if is_child_header(i.header) and i.header.get("parentSession") == parent]
    return sorted(found, key=lambda i: i.created_at)


def _describe(stored: StoredSession | None, session_id: str) -> str:
    link = link_of(stored) if stored is not None else None
    if link is None:
        return session_id
    return f"{session_id}  {link.get('agent')}: {link.get('description')} (call {link.get('parentCallId')}, depth {link.get('delegationDepth')})"


async def link_lines(store: SessionStore, stored: StoredSession) -> list[str]:
    """What ``show`` adds: the parent of a child, and the children of any session."""
    lines: list[str] = []
    if is_child_header(stored.header):
        link = link_of(stored) or {}
        lines.append(
            f"delegated by session {stored.header.get('parentSession')} (call {link.get('parentCallId')}, depth {link.get('delegationDepth')}); "
            f"the parent: dsh sessions show {stored.header.get('parentSession')}"
        )
    kids = _children(await store.list(), str(stored.header["id"]))
    for info in kids:
        try:
            kid: StoredSession | None = await store.read(info.id)
        except StoreError:
            kid = None
        lines.append(f"subagent session {_describe(kid, info.id)}")
    return [escape_controls(line) for line in lines]


async def tree_lines(store: SessionStore, session_id: str) -> list[str]:
    """The whole delegation tree ``session_id`` belongs to, from its root."""
    infos = await store.list()
    headers = {i.id: i.header for i in infos}
    root = session_id
    while is_child_header(headers.get(root, {})) and headers[root].get("parentSession") in headers:
        root = headers[root]["parentSession"]
    lines: list[str] = []

    async def visit(sid: str, prefix: str, last: bool, top: bool) -> None:
        try:
            stored: StoredSession | None = await store.read(sid)
        except StoreError:
            stored = None
        mark = "" if top else ("└─ " if last else "├─ ")
        here = " (this session)" if sid == session_id else ""
        lines.append(escape_controls(prefix + mark + _describe(stored, sid) + here))
        kids = _children(infos, sid)
        inner = prefix + ("" if top else ("   " if last else "│  "))
        for n, kid in enumerate(kids):
            await visit(kid.id, inner, n == len(kids) - 1, False)

    await visit(root, "", True, True)
    return lines
