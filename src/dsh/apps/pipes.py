"""A closed stdout (``dsh chat | head -2``) ends dsh quietly, as it ends Unix tools.

When the reader of stdout goes away, writes raise ``BrokenPipeError``. dsh then stops writing,
points the stdout descriptor at ``/dev/null`` (so the interpreter's final flush of buffered text
cannot raise again and print "Exception ignored"), and exits with :data:`EXIT_PIPE`, the status a
shell reports for a process killed by ``SIGPIPE``. No traceback, no error line.
"""

from __future__ import annotations

import contextlib
import os
import sys

EXIT_PIPE = 141  # 128 + SIGPIPE


def is_broken_pipe(exc: BaseException) -> bool:
    """``BrokenPipeError`` itself, or an exception group made only of them."""
    if isinstance(exc, BrokenPipeError):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(is_broken_pipe(inner) for inner in exc.exceptions)
    return False


def silence_stdout() -> None:
    """Send whatever is still buffered for stdout to ``/dev/null``."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
