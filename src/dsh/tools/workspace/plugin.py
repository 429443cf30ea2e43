"""The ``workspace-tools`` plugin: mounts the shell, job, file, search and todo tools, the sandbox
policy and the approval service (:data:`~dsh.tools.workspace.approval.APPROVAL`) on the tool
registry (:data:`~dsh.tools.registry.TOOLS`).

It registers every tool not disabled in ``tools`` (``{"bash": false}``), installs the approval
service as the tool registry's gate (so any tool with ``needs_approval`` passes it), tells each
session the effective approval policy once, and when disposed kills its background jobs and
removes its spill and sandbox temp folders.
See :mod:`.config` for the keys.
"""

from __future__ import annotations

from dsh.permissions import RuleError
from dsh.permissions.policy import RuleText
from dsh.permissions.project import ProjectRules
from dsh.runtime import ConfigError, Context
from dsh.tools.registry import TOOLS
from dsh.tools.workspace.approval import APPROVAL, ApprovalService
from dsh.tools.workspace.bash import bash_tool
from dsh.tools.workspace.config import TOOL_NAMES, Config, Shared
from dsh.tools.workspace.fs import ReadLedger, fs_tools
from dsh.tools.workspace.jobs import JOBS, JobManager, job_tools
from dsh.tools.workspace.rule_book import RuleBook
from dsh.tools.workspace.search import search_tools
from dsh.tools.workspace.spill import SpillStore
from dsh.tools.workspace.todo import todo_tool

__all__ = ["Config", "apply", "inject", "name"]

name = "workspace-tools"
inject = ["tools"]


def _rule_book(config: Config) -> RuleBook:
    texts = [RuleText(r.action, r.rule, r.source, r.anchor) for r in config.rules]
    for action in ("allow", "ask", "deny"):
        texts += [RuleText(action, text, "config") for text in getattr(config.permissions, action)]
    try:
        return RuleBook(texts, skip_approvals=config.skip_approvals,
                        project=ProjectRules() if config.project_rules else None)
    except RuleError as exc:
        raise ConfigError(f"workspace-tools: {exc}") from None


async def apply(ctx: Context, config: Config) -> None:
    unknown = sorted(set(config.tools) - set(TOOL_NAMES))
    if unknown:
        raise ValueError(f"workspace-tools: unknown tool(s) in tools: {', '.join(unknown)}")
    approval = ApprovalService(config.approval, config.approval_required, book=_rule_book(config))
    ctx.provide(APPROVAL, approval)
    spill = SpillStore(
        config.spill_dir,
        max_call_bytes=config.max_spill_bytes,
        max_session_bytes=config.max_session_spill_bytes,
    )
    shared = Shared(
        config=config,
        approval=approval,
        jobs=JobManager(spill, grace_ms=config.grace_ms, max_output_bytes=config.max_output_bytes),
        ledger=ReadLedger(),
        spill=spill,
    )
    ctx.provide(JOBS, shared.jobs)
    registry = ctx.require(TOOLS)
    ctx.defer(registry.set_approval_gate(approval))
    tools = [
        bash_tool(shared),
        *job_tools(shared.jobs, wait_ms=config.job_wait_ms, max_wait_ms=config.max_job_wait_ms),
        *fs_tools(shared),
        *search_tools(shared),
        todo_tool(),
    ]
    for tool in tools:
        if config.tools.get(tool.name, True):
            ctx.defer(registry.register(tool))
    ctx.on("agent/pre-step", approval.on_pre_step)
    ctx.defer(shared.dispose)
