"""Delegation lineage as the log records it, for every reader (the CLI, the plugin).

A child session's header carries ``parentSession`` with ``seedLength: 0`` (a fork always
carries its seed, so its ``seedLength`` is at least 1), and its first event is
``subagent/link`` ``{parentSession, parentCallId, delegationDepth, origin: "subagent", agent,
description}`` (the reference's header field names, kept in an event because the v0 header has
no room for them). Importing this module loads nothing of the agent spine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["LINK_EVENT", "delegation_root", "depth_of", "is_child_header", "label_of", "link_of"]

LINK_EVENT: Final = "subagent/link"


def is_child_header(header: Mapping[str, Any]) -> bool:
    """Whether a session header is a delegated child's (not a top-level session or a fork)."""
    return isinstance(header.get("parentSession"), str) and header.get("seedLength") == 0


def link_of(session: Any) -> Mapping[str, Any] | None:
    """The ``subagent/link`` data of a child session (its first event), else ``None``."""
    events = getattr(session, "events", ())
    for event in events[:2]:
        if event.type == LINK_EVENT and isinstance(event.data, Mapping):
            return event.data
    return None


def depth_of(session: Any) -> int:
    """A session's delegation depth: 0 for a top-level session, from its durable link else."""
    link = link_of(session)
    depth = link.get("delegationDepth") if link is not None else None
    return depth if isinstance(depth, int) and depth >= 0 else 0


def delegation_root(agent: Any) -> tuple[Any, str | None]:
    """The top-level agent a (live) child works for, and the root's tool call that started the
    chain (``None`` for a top-level agent): a child's approval questions are asked there."""
    call_id: str | None = None
    seen = 0
    while seen < 64:
        link = getattr(getattr(agent, "options", None), "delegated_by", None)
        if link is None:
            break
        agent, call_id = link
        seen += 1
    return agent, call_id


def label_of(agent: Any) -> str | None:
    """``subagent reviewer`` (nested: ``subagent a › b``) for a child, ``None`` for a top-level agent."""
    names: list[str] = []
    while True:
        options = getattr(agent, "options", None)
        link = getattr(options, "delegated_by", None)
        if link is None or len(names) >= 64:
            break
        names.append(str(getattr(options, "label", None) or "subagent"))
        agent = link[0]
    return "subagent " + " › ".join(reversed(names)) if names else None
