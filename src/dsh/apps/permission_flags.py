"""The permission flags of ``dsh chat``, ``dsh run``, ``dsh acp`` and ``dsh reminders run``, and
the rules the workspace tools get from them and from the settings files.

- ``--allow PATTERN`` / ``--deny PATTERN`` (repeatable): rules in the permission rule syntax
  (``bash(npm run test:*)``, ``Write(src/**)``, ``mcp__github__*``; see
  ``src/dsh/permissions/README.md``), source ``--allow`` / ``--deny``.
- ``--full-auto``: the ``workspace-write`` sandbox; what runs inside it is never asked, anything
  else is asked (or refused where no one can answer) as without the flag.
- ``--dangerously-skip-approvals``: ``danger-full-access`` and nothing is asked (deny rules
  still refuse); one warning line on stderr at start.

Contradictory combinations are refused in one line (exit 2). :func:`workspace_overrides` is
what these add to the ``workspace-tools`` entry's config; :func:`settings_rules` the rules of
the user's and the (trusted) project's settings files.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Final

from dsh.errors import UsageError

__all__ = ["SKIP_WARNING", "add_arguments", "announce", "settings_rules", "workspace_overrides"]

SKIP_WARNING: Final = (
    "dsh: warning: --dangerously-skip-approvals: commands run without a sandbox and nothing is "
    "asked (deny rules still apply)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("permissions")
    group.add_argument(
        "--allow", action="append", metavar="PATTERN",
        help="allow calls this rule matches without asking (repeatable): bash(npm run test:*), write(src/**), mcp__github__*",
    )
    group.add_argument(
        "--deny", action="append", metavar="PATTERN",
        help="refuse calls this rule matches (repeatable; deny wins over allow)",
    )
    group.add_argument(
        "--full-auto", action="store_true",
        help="workspace-write sandbox; everything inside it runs without asking, anything else asks as usual",
    )
    group.add_argument(
        "--dangerously-skip-approvals", action="store_true",
        help="danger-full-access and nothing is asked (deny rules still apply)",
    )


def _check(args: argparse.Namespace) -> None:
    full_auto = getattr(args, "full_auto", False)
    skip = getattr(args, "dangerously_skip_approvals", False)
    sandbox = getattr(args, "sandbox", None)
    if full_auto and skip:
        raise UsageError("--full-auto and --dangerously-skip-approvals cannot be combined (pick one)")
    if full_auto and sandbox not in (None, "workspace-write"):
        raise UsageError(f"--full-auto uses the workspace-write sandbox; it cannot be combined with --sandbox {sandbox}")
    if skip and sandbox not in (None, "danger-full-access"):
        raise UsageError(f"--dangerously-skip-approvals runs unconfined; it cannot be combined with --sandbox {sandbox}")
    if skip and getattr(args, "approval", None) == "never":
        raise UsageError("--dangerously-skip-approvals allows what asks; it cannot be combined with --approval never")


def _flag_rules(args: argparse.Namespace) -> list[dict[str, Any]]:
    from dsh.permissions import RuleError
    from dsh.permissions.policy import Action, RuleText, check_rules

    out: list[dict[str, Any]] = []
    flags: tuple[tuple[Action, str], ...] = (("allow", "--allow"), ("deny", "--deny"))
    for action, flag in flags:
        for text in getattr(args, action, None) or ():
            try:
                check_rules([RuleText(action, text, flag)], os.getcwd())
            except RuleError as exc:
                raise UsageError(str(exc)) from None
            out.append({"action": action, "rule": text, "source": flag})
    return out


def settings_rules(folder: str, *, hooks_mounted: bool = False) -> list[dict[str, Any]]:
    """The ``permissions`` of the user's settings files and of the project's trusted ones
    (:mod:`dsh.settings`; an untrusted project file gets the trust gate's one line and grants
    nothing), as ``rules`` entries ``{action, rule, source, anchor}``: source ``user settings
    <path>`` / ``project settings <path>``; ``/p`` paths start at the project folder for a
    project file, at the file's folder for a user file.

    ``hooks_mounted``: the composition's ``hooks`` plugin reads the same files and reports an
    untrusted or unreadable one (its one line; exit 2), so it is not reported twice here."""
    from pathlib import Path

    from dsh.runtime import ConfigError
    from dsh.settings import load_settings

    try:
        settings = load_settings(Path(folder), check_trust=not hooks_mounted)
    except ConfigError:
        if hooks_mounted:
            return []  # the hooks plugin fails the load with this file's line
        raise
    out: list[dict[str, Any]] = []
    for entry in settings.section("permissions"):
        source = f"{entry.scope} settings {entry.file}"
        anchor = folder if entry.scope == "project" else str(entry.file.parent)
        for action in ("allow", "ask", "deny"):
            for text in getattr(entry.value, action):
                out.append({"action": action, "rule": text, "source": source, "anchor": anchor})
    return out


def workspace_overrides(args: argparse.Namespace, *, hooks_mounted: bool = False) -> dict[str, Any]:
    """What the permission flags (and settings files) add to the workspace-tools config."""
    _check(args)
    out: dict[str, Any] = {}
    rules = settings_rules(os.getcwd(), hooks_mounted=hooks_mounted) + _flag_rules(args)
    if rules:
        out["rules"] = rules
    if getattr(args, "full_auto", False):
        out["sandbox"] = "workspace-write"
    if getattr(args, "dangerously_skip_approvals", False):
        out["sandbox"] = "danger-full-access"
        out["skipApprovals"] = True
    return out


def announce(args: argparse.Namespace) -> None:
    """The start-up line of ``--dangerously-skip-approvals`` (after the flags were checked)."""
    if getattr(args, "dangerously_skip_approvals", False):
        _check(args)
        print(SKIP_WARNING, file=sys.stderr, flush=True)
