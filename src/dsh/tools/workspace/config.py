"""The ``workspace-tools`` config and the per-plugin state every tool module shares.

YAML keys (all optional): ``sandbox`` (``read-only`` | ``workspace-write`` |
``danger-full-access``, default ``workspace-write``), ``network`` (default false), ``approval``
(``ask`` | ``never``, default ``ask``), ``approvalRequired`` (tool names that always ask),
``askUnconfinedBash`` (default true: ``bash`` under ``danger-full-access`` asks first),
``tools`` (``{name: false}`` disables one), ``timeoutMs`` / ``maxTimeoutMs`` (bash, default
120000 / 600000), ``graceMs`` (SIGTERM→SIGKILL, default 2000), ``maxOutputBytes`` (per stream,
default 30000), ``jobWaitMs`` / ``maxJobWaitMs`` (``job_output`` wait, default 30000 / 300000),
``maxReadBytes`` (files larger are refused by ``read``, default 5 MB), ``maxWriteBytes`` (default
5 MB), ``searchTimeoutMs`` (``grep``/``glob`` are stopped after it, default 60000),
``maxSpillBytes`` / ``maxSessionSpillBytes`` (output kept on disk per call / per session,
default 64 MiB / 256 MiB), ``spillDir`` (the base of the private spill folder, default
``$XDG_RUNTIME_DIR`` or the temp dir), ``bwrap`` (path to bubblewrap), ``shellEnvironment``
(``{passthrough: [NAME or glob], set: {NAME: value}}``, see :mod:`.environment`),
``permissions`` (``{allow: [rule], ask: [rule], deny: [rule]}``, Claude Code's shape), ``rules``
(``[{action, rule, source, anchor?}]``: the same with a source, as the apps pass flags and
settings), ``skipApprovals`` (``--dangerously-skip-approvals``: nothing asked, deny rules still
refuse), ``projectRules`` (default true: honour and offer "always allow in this project").

:class:`Shared` owns this process's private folders (spill files, sandbox temp dirs) and removes
them in :meth:`Shared.dispose`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec

from dsh.tools.types import ToolCall
from dsh.tools.workspace._common import session_id, workspace_root
from dsh.tools.workspace.environment import ShellEnvironment
from dsh.tools.workspace.private import PrivateDir
from dsh.tools.workspace.sandbox import SandboxPolicy
from dsh.tools.workspace.spill import DEFAULT_CALL_BYTES, DEFAULT_SESSION_BYTES, SpillStore

if TYPE_CHECKING:
    from dsh.tools.workspace.approval import ApprovalService
    from dsh.tools.workspace.jobs import JobManager
    from dsh.tools.workspace.ledger import ReadLedger

__all__ = ["TOOL_NAMES", "Config", "Permissions", "RuleSpec", "Shared"]

TOOL_NAMES = ("bash", "job_output", "job_list", "job_kill", "read", "write", "edit", "glob", "grep", "todo_write")

Positive = Annotated[int, msgspec.Meta(ge=1)]


class RuleSpec(msgspec.Struct, rename="camel", frozen=True):
    """One permission rule with its list and source (what the apps pass from flags and
    settings files); ``anchor`` is the folder a ``/p`` path starts from."""

    action: Literal["allow", "ask", "deny"]
    rule: str
    source: str = "config"
    anchor: str | None = None


class Permissions(msgspec.Struct, frozen=True):
    """Claude Code's shape, for a YAML composition: ``{allow: [...], ask: [...], deny: [...]}``."""

    allow: list[str] = msgspec.field(default_factory=list)
    ask: list[str] = msgspec.field(default_factory=list)
    deny: list[str] = msgspec.field(default_factory=list)


class Config(msgspec.Struct, rename="camel"):
    sandbox: Literal["read-only", "workspace-write", "danger-full-access"] = "workspace-write"
    network: bool = False
    approval: Literal["ask", "never"] = "ask"
    approval_required: list[str] = msgspec.field(default_factory=list)
    ask_unconfined_bash: bool = True
    tools: dict[str, bool] = msgspec.field(default_factory=dict)
    timeout_ms: Positive = 120_000
    max_timeout_ms: Positive = 600_000
    grace_ms: Annotated[int, msgspec.Meta(ge=0)] = 2_000
    max_output_bytes: Positive = 30_000
    job_wait_ms: Positive = 30_000
    max_job_wait_ms: Positive = 300_000
    max_read_bytes: Positive = 5 * 1024 * 1024
    max_write_bytes: Positive = 5 * 1024 * 1024
    search_timeout_ms: Positive = 60_000
    max_spill_bytes: Positive = DEFAULT_CALL_BYTES
    max_session_spill_bytes: Positive = DEFAULT_SESSION_BYTES
    spill_dir: str | None = None
    bwrap: str | None = None
    shell_environment: ShellEnvironment = msgspec.field(default_factory=ShellEnvironment)
    permissions: Permissions = msgspec.field(default_factory=Permissions)
    rules: list[RuleSpec] = msgspec.field(default_factory=list)
    skip_approvals: bool = False
    project_rules: bool = True


@dataclass
class Shared:
    """What the tools of one mounted plugin share."""

    config: Config
    approval: ApprovalService
    jobs: JobManager
    ledger: ReadLedger
    spill: SpillStore
    temp: PrivateDir = field(default_factory=lambda: PrivateDir("dsh-sandbox-"))

    def policy(self, call: ToolCall, *, with_temp: bool = True) -> SandboxPolicy:
        """The sandbox of this call; under ``workspace-write`` its temp dir is made here (unless
        ``with_temp`` is false: only the mode is needed)."""
        temp = None
        if with_temp and self.config.sandbox == "workspace-write":
            temp = self.temp.session_dir(session_id(call))
        return SandboxPolicy(
            mode=self.config.sandbox,
            workspace=workspace_root(call),
            network=self.config.network,
            bwrap=self.config.bwrap,
            temp=temp,
        )

    async def dispose(self) -> None:
        """The session is over: stop its jobs, then remove the spill and temp folders."""
        await self.jobs.dispose()
        self.spill.dispose()
        self.temp.dispose()

    def session(self, call: ToolCall) -> str:
        return session_id(call)
