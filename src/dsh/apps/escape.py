"""The one sanitiser for text dsh writes to a terminal.

Model output (text, reasoning, tool-call arguments), tool output, server errors, folder names
and session ids from imported logs can carry terminal control sequences: ``\\x1b[2J`` clears the
screen, ``\\x1b]0;TITLE\\x07`` sets the window title, OSC 52 writes the clipboard, and the bidi
controls (U+202A-U+202E, U+2066-U+2069, U+200E/U+200F, U+061C) reorder what is shown so that
text reads differently from what it is. Everything dsh shows a person on a terminal goes
through :func:`escape_controls`, which makes each of them visible as text (``\\x1b``,
``\\u202e``), so the sequence is shown, not obeyed; newlines and tabs stay. JSON written to a
terminal goes through :func:`escape_json` instead, which writes the same characters as JSON
``\\uXXXX`` escapes: still valid JSON, and the same value once decoded.

The views that print with ``print`` (``dsh run``, ``dsh sessions``, ``dsh mcp list``,
``dsh reminders``) get this at one place: :func:`guard_stdio` wraps ``sys.stdout`` and
``sys.stderr`` when they are terminals, so no print site can forget it. ``dsh chat`` escapes
what it draws itself (its terminal mode writes styles of its own). Output to a pipe or a file
never goes through any of this: it stays byte-exact.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["escape_controls", "escape_json", "for_stream", "guard_stdio", "keep"]

# C0 controls except \t (0x09) and \n (0x0a), DEL, the C1 controls (0x80-0x9f: a lone U+009B
# is a CSI on terminals that honour 8-bit controls), and the bidi controls: embeddings and
# overrides U+202A-U+202E, isolates U+2066-U+2069, the marks U+200E, U+200F and U+061C.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """Make terminal control characters visible (``\\x1b``, ``\\u202e``); newlines and tabs stay."""
    return _CONTROL.sub(_visible, text)


def escape_json(text: str) -> str:
    """JSON text with every terminal control character written as a ``\\uXXXX`` escape.

    Outside strings JSON allows no raw character but whitespace (a raw tab or newline is that,
    and stays); inside one the escape means the same character: the text stays valid JSON of
    the same value."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def keep(text: str) -> str:
    """The identity, for output that must stay byte-exact (plain mode to a pipe)."""
    return text


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False


def for_stream(stream: object, *, json: bool = False) -> Callable[[str], str]:
    """The sanitiser for ``stream``: :func:`escape_controls` (or :func:`escape_json`) when it is
    a terminal, :func:`keep` otherwise."""
    if not _isatty(stream):
        return keep
    return escape_json if json else escape_controls


class _Guarded(io.TextIOBase):
    """A text stream whose writes are sanitised before they reach the wrapped one."""

    def __init__(self, inner: TextIO, sanitise: Callable[[str], str]) -> None:
        super().__init__()
        self._inner = inner
        self._sanitise = sanitise

    def write(self, text: str) -> int:
        self._inner.write(self._sanitise(text))
        return len(text)

    def flush(self) -> None:
        self._inner.flush()

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._inner.encoding

    @property
    def buffer(self) -> object:
        """Bytes written here bypass the sanitiser: only byte-exact output uses it."""
        return self._inner.buffer


@contextmanager
def guard_stdio(*, json: bool = False) -> Iterator[None]:
    """Within the block, what is written to ``sys.stdout`` and ``sys.stderr`` goes through the
    sanitiser when they are terminals (``json``: stdout carries JSON). Pipes are untouched."""
    saved = sys.stdout, sys.stderr
    if _isatty(sys.stdout):
        sys.stdout = _Guarded(sys.stdout, escape_json if json else escape_controls)
    if _isatty(sys.stderr):
        sys.stderr = _Guarded(sys.stderr, escape_controls)
    try:
        yield
    finally:
        for guarded in (sys.stdout, sys.stderr):
            if isinstance(guarded, _Guarded):
                guarded.flush()
        sys.stdout, sys.stderr = saved
