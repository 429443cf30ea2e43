"""How ``dsh sessions show`` prints a hook run (the ``hook/invoked``/``hook/result`` pair).

The invoked event prints nothing while its result follows (``names`` remembers its command);
the result prints one line: ``hook  PreToolUse [Bash] ./guard.sh → block (exit 2, 14 ms): rm -rf
refused``. An invoked event without a result (a crash mid-hook) prints ``hook ... (no result)``
at the end of its turn only through ``--events``; the timeline shows the call line alone.
"""

from __future__ import annotations

from typing import Any

__all__ = ["hook_entry"]


def hook_entry(kind: str, data: dict[str, Any], names: dict[str, str] | None) -> str | None:
    """The timeline text of a ``hook/*`` event (without the time column), or ``None``."""
    if kind == "hook/invoked":
        matcher = f" [{data['matcher']}]" if data.get("matcher") else ""
        what = f"{data.get('point')}{matcher} {data.get('command', data.get('handlerId'))}"
        if names is not None:
            names[f"hook:{data.get('handlerId')}"] = what
            return None
        return f"hook       {what}"
    if kind != "hook/result":
        return None
    what = (names or {}).get(f"hook:{data.get('handlerId')}", str(data.get("point")))
    facts = []
    if "exitCode" in data:
        facts.append(f"exit {data['exitCode']}")
    if data.get("timedOut"):
        facts.append("timed out, killed")
    if data.get("cancelled"):
        facts.append("cancelled")
    if data.get("error"):
        facts.append(f"could not start: {data['error']}")
    facts.append(f"{data.get('durationMs', 0)} ms")
    said = data.get("stderrSummary") or data.get("stdoutSummary")
    tail = f": {str(said).replace(chr(10), ' ')}" if said else ""
    return f"hook       {what} → {data.get('decision')} ({', '.join(facts)}){tail}"
