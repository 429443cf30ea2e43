"""The one sanitiser for text dsh writes to a terminal.

Model output (text, reasoning, tool-call arguments), tool output and error text can carry
terminal control sequences: ``\\x1b[2J`` clears the screen, ``\\x1b]0;TITLE\\x07`` sets the window
title, OSC 52 writes the clipboard. Everything dsh shows a person on a terminal (``dsh chat`` in
terminal mode, plain mode when stdout is a terminal, ``dsh sessions`` views) goes through
:func:`escape_controls`, which makes every C0/C1 control character visible as ``\\xNN`` text, so
the sequence is shown, not obeyed. Newlines and tabs stay. Plain mode writing to a pipe or file
does not use it: that output stays byte-exact.
"""

from __future__ import annotations

import re

# C0 controls except \t (0x09) and \n (0x0a), DEL, and the C1 controls (0x80-0x9f: a lone
# U+009B is a CSI on terminals that honour 8-bit controls).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape_controls(text: str) -> str:
    """Make terminal control characters visible (``\\x1b`` etc.); newlines and tabs stay."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def keep(text: str) -> str:
    """The identity, for output that must stay byte-exact (plain mode to a pipe)."""
    return text
