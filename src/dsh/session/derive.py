"""Derivation: the model-visible conversation projected from the surface of the log.

Owns the exact projection of each surface event into a message (docs/surface-and-derivation.md) and the
immutable :class:`DerivedMessages` snapshot that ``Session.derive_messages()`` returns.

Why a view and not a fresh list: copying the history on every call makes deriving after each
append quadratic. A snapshot here is ``(backing list, length)``; the backing list only ever grows
until a replace, which starts a new one, so an old snapshot never changes under its holder.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from dsh import _json
from dsh.session.event import Event

Message = dict[str, Any]
"""``{"role": "user" | "assistant", "content": [block, ...]}``: plain JSON data, read-only."""


def _wrapper(tag: str, source: Any) -> str:
    kind = source.get("kind") if type(source) is dict else None
    return f"<{tag} source={_json.dumps(kind)}>"


def project(event: Event) -> Message | None:
    """The message one surface event contributes, or ``None`` (docs/surface-and-derivation.md, exact)."""
    kind = event.type
    data = event.data
    if kind == "user/message":
        return {"role": "user", "content": data["content"]}
    if kind == "assistant/message":
        content = data["content"]
        return {"role": "assistant", "content": content} if content else None
    if kind == "tool/result":
        block = {
            "type": "tool-result",
            "toolCallId": data["callId"],
            "content": data["content"],
            "isError": data["isError"],
        }
        return {"role": "user", "content": [block]}
    if kind == "context/message":
        if data.get("envelope") == "raw":
            return {"role": "user", "content": data["content"]}
        return {
            "role": "user",
            "content": [
                {"type": "text", "text": _wrapper("context", data.get("source"))},
                *data["content"],
                {"type": "text", "text": "</context>"},
            ],
        }
    if kind == "steering/message":
        return {
            "role": "user",
            "content": [
                {"type": "text", "text": _wrapper("steering", data.get("source"))},
                *data["content"],
                {"type": "text", "text": "</steering>"},
            ],
        }
    return None


class DerivedMessages(Sequence[Message]):
    """An immutable snapshot of derived messages. Compares equal to an equal list."""

    __slots__ = ("_items", "_len")

    def __init__(self, items: list[Message], length: int) -> None:
        self._items = items
        self._len = length

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return self._items[: self._len][index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("derived message index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[Message]:
        return itertools.islice(self._items, self._len)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DerivedMessages):
            return self._len == other._len and (
                (self._items is other._items) or self.to_list() == other.to_list()
            )
        if isinstance(other, (list, tuple)):
            return self._len == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def to_list(self) -> list[Message]:
        """A plain list copy (shallow): for JSON encoding or mutation by the caller."""
        return self._items[: self._len]

    def __repr__(self) -> str:
        return f"DerivedMessages({self.to_list()!r})"


def derive_messages(events: Iterable[Event]) -> list[Message]:
    """Fold a raw log from scratch and project its surface (the naive reference algorithm).

    Deliberately independent of :class:`~dsh.session.log.Session`'s incremental cache, so it can
    check it: the surface is a list of node seqs, an ``append`` adds one and a replace
    ``{start, end}`` swaps the nodes from ``start`` to ``end`` for the replacing event.
    """
    by_seq: dict[int, Event] = {}
    nodes: list[int] = []
    for event in events:
        by_seq[event.seq] = event
        op = event.surface_op
        if op == "append":
            nodes.append(event.seq)
        elif isinstance(op, dict):
            i = nodes.index(op["start"])
            j = nodes.index(op["end"])
            nodes[i : j + 1] = [event.seq]
    projected = (project(by_seq[seq]) for seq in nodes)
    return [message for message in projected if message is not None]
