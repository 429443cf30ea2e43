"""The ``bash`` tool: a fresh ``bash -c`` per call in the session's workspace, under the sandbox.

Result text (the reference's): the stdout tail, an optional ``[stderr]`` section, ``(no output)``
when there was none, then the markers ``[output truncated; full output: <path>]``,
``[sandbox: file access denied under <mode> mode]``, ``[timed out after <ms>ms]``,
``[killed by signal: <name>]`` and ``[exit code: N]`` (non-zero only). A non-zero exit is a normal
result the model reads, not ``isError``; only refusals (sandbox unavailable, approval) and aborts
are errors. ``run_in_background`` hands the process to :mod:`.jobs` and returns at once.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Final

from dsh.tools.types import Tool, ToolCall, ToolError, ToolResult, define_tool
from dsh.tools.workspace._common import (
    bool_arg,
    number_arg,
    resolve_path,
    str_arg,
    text,
    workspace_root,
)
from dsh.tools.workspace.config import Shared
from dsh.tools.workspace.process import ENV_OVERRIDES, spawn, tail_text
from dsh.tools.workspace.sandbox import SandboxPolicy, SandboxUnavailable, denial_marker

__all__ = ["DESCRIPTION", "PARAMETERS", "bash_tool", "command_env", "prepare"]

DESCRIPTION: Final = (
    "Execute a bash command (`bash -c`) and return its stdout/stderr. Each call runs in a fresh "
    "shell: no state (cwd, variables, functions) persists between calls — pass `workdir` instead "
    "of using `cd`. Non-zero exits are reported as `[exit code: N]`. Current harness environment "
    "facts are exposed through managed `$DSH_*` variables; inspect them when needed. Commands may "
    "run under a file sandbox; a blocked file operation is reported as `[sandbox: file access "
    "denied under <mode> mode]` — a policy denial, not a bug in the command; do not retry another "
    "way. Long output is truncated to its tail; the full output is saved to a file whose path is "
    "reported when available. Set `run_in_background: true` for long-running commands: the call "
    "returns a job id immediately; read its output with `job_output` and stop it with `job_kill`."
)

PARAMETERS: Final = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The bash command to execute."},
        "description": {
            "type": "string",
            "description": (
                "Clear, concise description of what this command does in active voice, 5-10 words "
                '(shown in the UI). Examples: "ls" → "List files in current directory"; "git status" '
                '→ "Show working tree status"; "npm install" → "Install package dependencies".'
            ),
        },
        "timeoutMs": {
            "type": "number",
            "description": "Timeout in milliseconds. The executor applies its configured default and cap, and kills the command on expiry.",
        },
        "workdir": {
            "type": "string",
            "description": "Working directory for this command. Defaults to the session workspace; a relative path is resolved against it.",
        },
        "run_in_background": {
            "type": "boolean",
            "description": "Run in the background and return a job id immediately (collect with job_output, stop with job_kill). No timeout applies.",
        },
    },
    "required": ["command", "description"],
}


def command_env(call: ToolCall, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The command's environment: ours minus stale ``DSH_*``, plus the managed values."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    env.update(ENV_OVERRIDES)
    env["DSH_SHELL"] = "1"
    session = getattr(call.agent, "session", None)
    if session is not None:
        env["DSH_SESSION_ID"] = str(session.id)
    if extra:
        env.update(extra)
    return env


async def prepare(shared: Shared, args: Any, call: ToolCall) -> tuple[str, list[str], Path, dict[str, str]]:
    """Validate the arguments, ask for approval when needed, and build the (wrapped) argv.
    Returns ``(command, argv, workdir, env)``; refusals raise :class:`ToolError`."""
    command = str_arg(args, "command", allow_empty=False)
    str_arg(args, "description", required=False)
    workdir_arg = str_arg(args, "workdir", required=False)
    assert command is not None
    root = workspace_root(call)
    workdir = resolve_path(root, workdir_arg) if workdir_arg else root
    if not workdir.is_dir():
        raise ToolError(f'invalid workdir: "{workdir_arg}" is not a directory')
    policy = shared.policy(call)
    if not policy.confined and shared.config.ask_unconfined_bash:
        refusal = await shared.approval.check(
            call, "runs without a sandbox (danger-full-access)", subject=command
        )
        if refusal is not None:
            raise ToolError(refusal, code="APPROVAL")
    session = shared.session(call)
    try:
        argv = policy.wrap(["bash", "-c", command], workdir=workdir, session=session)
    except SandboxUnavailable as exc:
        raise ToolError(str(exc), code="SANDBOX_UNAVAILABLE") from None
    extra = {"TMPDIR": str(policy.temp_dir(session))} if policy.mode == "workspace-write" else None
    return command, argv, workdir, command_env(call, extra)


def _render(
    shared: Shared, call: ToolCall, out: Path, err: Path, mode: str, confined: bool,
    timeout_ms: float, outcome: Any,
) -> str:
    cap = shared.config.max_output_bytes
    stdout, cut_out, _ = tail_text(out, cap)
    stderr, cut_err, _ = tail_text(err, cap)
    parts: list[str] = []
    if stdout:
        parts.append(stdout if stdout.endswith("\n") else stdout + "\n")
    if stderr:
        parts.append("[stderr]\n" + (stderr if stderr.endswith("\n") else stderr + "\n"))
    body = "".join(parts) or "(no output)\n"
    markers: list[str] = []
    if cut_out or cut_err:
        spill = shared.spill.path_for(shared.session(call), "bash")
        with spill.open("wb") as fh:
            with out.open("rb") as src:
                shutil.copyfileobj(src, fh)  # streamed: the output may be far larger than memory
            if err.stat().st_size:
                fh.write(b"\n[stderr]\n")
                with err.open("rb") as src:
                    shutil.copyfileobj(src, fh)
        markers.append(f"[output truncated; full output: {spill}]")
    failed = outcome.exit_code not in (0, None) or outcome.signal is not None
    if confined and failed and SandboxPolicy.looks_denied(stdout + stderr):
        markers.append(denial_marker(mode))
    if outcome.timed_out:
        markers.append(f"[timed out after {int(timeout_ms)}ms]")
    if outcome.signal is not None:
        markers.append(f"[killed by signal: {outcome.signal}]")
    if outcome.exit_code not in (0, None):
        markers.append(f"[exit code: {outcome.exit_code}]")
    return body + "".join(m + "\n" for m in markers)


def bash_tool(shared: Shared) -> Tool:
    async def execute(args: Any, call: ToolCall) -> ToolResult | list[Any]:
        timeout = number_arg(args, "timeoutMs", minimum=1)
        background = bool_arg(args, "run_in_background")
        command, argv, workdir, env = await prepare(shared, args, call)
        if background:
            job = await shared.jobs.start(call, command, argv, workdir, env)
            return text(f"started background job {job.id}\njob_id: {job.id}")
        config = shared.config
        timeout_ms = min(timeout if timeout is not None else config.timeout_ms, config.max_timeout_ms)
        session = shared.session(call)
        out = shared.spill.path_for(session, "stdout")
        err = shared.spill.path_for(session, "stderr")
        try:
            proc = await spawn(argv, cwd=workdir, env=env, stdout=out, stderr=err, grace_ms=config.grace_ms)
            outcome = await proc.wait(timeout_ms, call.signal)
            if outcome.aborted:
                return ToolResult(content=text("Error: tool call aborted"), is_error=True)
            policy = shared.policy(call)
            return text(_render(shared, call, out, err, policy.mode, policy.confined, timeout_ms, outcome))
        finally:
            for path in (out, err):
                path.unlink(missing_ok=True)

    return define_tool(name="bash", description=DESCRIPTION, parameters=PARAMETERS, execute=execute)
