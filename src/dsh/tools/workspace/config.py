"""The ``workspace-tools`` config and the per-plugin state every tool module shares.

YAML keys (all optional): ``sandbox`` (``read-only`` | ``workspace-write`` |
``danger-full-access``, default ``workspace-write``), ``network`` (default false), ``approval``
(``ask`` | ``never``, default ``ask``), ``approvalRequired`` (tool names that always ask),
``askUnconfinedBash`` (default true: ``bash`` under ``danger-full-access`` asks first),
``tools`` (``{name: false}`` disables one), ``timeoutMs`` / ``maxTimeoutMs`` (bash, default
120000 / 600000), ``graceMs`` (SIGTERM→SIGKILL, default 2000), ``maxOutputBytes`` (per stream,
default 30000), ``jobWaitMs`` / ``maxJobWaitMs`` (``job_output`` wait, default 30000 / 300000),
``maxReadBytes`` (files larger are refused by ``read``, default 5 MB), ``maxWriteBytes`` (default
5 MB), ``searchTimeoutMs`` (``grep``/``glob`` are stopped after it, default 60000), ``spillDir``
(default ``$TMPDIR/dsh-spill-<uid>``), ``bwrap`` (path to bubblewrap).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec

from dsh.tools.types import ToolCall
from dsh.tools.workspace._common import SpillStore, session_id, workspace_root
from dsh.tools.workspace.sandbox import SandboxPolicy

if TYPE_CHECKING:
    from dsh.tools.workspace.approval import ApprovalService
    from dsh.tools.workspace.jobs import JobManager
    from dsh.tools.workspace.ledger import ReadLedger

__all__ = ["TOOL_NAMES", "Config", "Shared"]

TOOL_NAMES = ("bash", "job_output", "job_list", "job_kill", "read", "write", "edit", "glob", "grep", "todo_write")

Positive = Annotated[int, msgspec.Meta(ge=1)]


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
    spill_dir: str | None = None
    bwrap: str | None = None


@dataclass
class Shared:
    """What the tools of one mounted plugin share."""

    config: Config
    approval: ApprovalService
    jobs: JobManager
    ledger: ReadLedger
    spill: SpillStore = field(init=False)

    def __post_init__(self) -> None:
        self.spill = SpillStore(self.config.spill_dir)

    def policy(self, call: ToolCall) -> SandboxPolicy:
        return SandboxPolicy(
            mode=self.config.sandbox,
            workspace=workspace_root(call),
            network=self.config.network,
            bwrap=self.config.bwrap,
        )

    def session(self, call: ToolCall) -> str:
        return session_id(call)
