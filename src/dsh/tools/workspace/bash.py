"""The ``bash`` tool: a fresh ``bash -c`` per call in the session's workspace, under the sandbox.

Result text (the reference's): the stdout tail, an optional ``[stderr]`` section, ``(no output)``
when there was none, then the markers ``[output truncated; full output: <path>]``,
``[sandbox: file access denied under <mode> mode]``, ``[timed out after <ms>ms]``,
``[killed by signal: <name>]`` and ``[exit code: N]`` (non-zero only); past the spill cap the
truncation marker says what was kept (:func:`~.spill.cap_note`). The command's environment is
:mod:`.environment`'s (no secrets). A non-zero exit is a normal
result the model reads, not ``isError``; only refusals (sandbox unavailable, approval) and aborts
are errors. ``run_in_background`` hands the process to :mod:`.jobs` and returns at once.
"""

from __future__ import annotations

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
from dsh.tools.workspace.environment import ShellEnvironment, shell_environment
from dsh.tools.workspace.private import PrivateDirError
from dsh.tools.workspace.process import ENV_OVERRIDES, spawn, tail_bytes, tail_text
from dsh.tools.workspace.sandbox import SandboxPolicy, SandboxUnavailable, denial_marker
from dsh.tools.workspace.spill import Capture

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


def command_env(
    call: ToolCall, extra: dict[str, str] | None = None, policy: ShellEnvironment | None = None
) -> dict[str, str]:
    """The command's environment: ours minus secrets and stale ``DSH_*`` (see
    :mod:`.environment`), the configured values, then the managed ones."""
    env = shell_environment(policy or ShellEnvironment())
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
    if not shared.policy(call, with_temp=False).confined and shared.config.ask_unconfined_bash:
        refusal = await shared.approval.check(
            call, "runs without a sandbox (danger-full-access)", subject=command
        )
        if refusal is not None:
            raise ToolError(refusal, code="APPROVAL")
    session = shared.session(call)
    try:
        policy = shared.policy(call)
        # The spill folder stays readable inside, so `cat <full output path>` works.
        readable = [shared.spill.session_dir(session)] if policy.confined else []
        argv = policy.wrap(["bash", "-c", command], workdir=workdir, session=session, readable=readable)
    except SandboxUnavailable as exc:
        raise ToolError(str(exc), code="SANDBOX_UNAVAILABLE") from None
    except PrivateDirError as exc:
        raise ToolError(str(exc)) from None
    extra = {"TMPDIR": str(policy.temp)} if policy.temp is not None else None
    return command, argv, workdir, command_env(call, extra, shared.config.shell_environment)


def _stream(capture: Capture, cap: int) -> tuple[str, bool]:
    """The text the model sees of one stream (its tail) and whether it was cut."""
    if not capture.overflowed:
        text_, cut, _ = tail_text(capture.path, cap)
        return text_, cut
    data = capture.tail()[-cap:]
    cut = capture.total > len(data)
    return tail_bytes(data, cut), cut


def _spill(shared: Shared, call: ToolCall, out: Capture, err: Capture) -> str:
    """Keep the full output (stdout, then ``[stderr]`` and stderr) and say where."""
    spill = shared.spill.path_for(shared.session(call), "bash")
    out.path.rename(spill)
    if err.kept:
        with spill.open("ab") as fh, err.path.open("rb") as src:
            fh.write(b"\n[stderr]\n")
            shutil.copyfileobj(src, fh)  # streamed: the output may be far larger than memory
    err.close()
    err.path.unlink(missing_ok=True)  # its bytes now count as the spill file's
    if not (out.overflowed or err.overflowed):
        return f"[output truncated; full output: {spill}]"
    kept, total = out.kept + err.kept, out.total + err.total
    if not kept:
        spill.unlink(missing_ok=True)
    return f"[output truncated; {shared.spill.note(kept, total, spill if kept else None)}]"


def _render(
    shared: Shared, call: ToolCall, out: Capture, err: Capture, policy: SandboxPolicy,
    workdir: Path, timeout_ms: float, outcome: Any,
) -> str:
    cap = shared.config.max_output_bytes
    stdout, cut_out = _stream(out, cap)
    stderr, cut_err = _stream(err, cap)
    parts: list[str] = []
    if stdout:
        parts.append(stdout if stdout.endswith("\n") else stdout + "\n")
    if stderr:
        parts.append("[stderr]\n" + (stderr if stderr.endswith("\n") else stderr + "\n"))
    body = "".join(parts) or "(no output)\n"
    markers: list[str] = []
    if cut_out or cut_err:
        markers.append(_spill(shared, call, out, err))
    failed = outcome.exit_code not in (0, None) or outcome.signal is not None
    if policy.confined and failed and policy.denied(stdout + stderr, workdir):
        markers.append(denial_marker(policy.mode))
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
        budget = shared.spill.budget(session)
        out = Capture(shared.spill.path_for(session, "stdout"), budget, config.max_output_bytes)
        err = Capture(shared.spill.path_for(session, "stderr"), budget, config.max_output_bytes)
        try:
            proc = await spawn(argv, cwd=workdir, env=env, stdout=out, stderr=err, grace_ms=config.grace_ms)
            outcome = await proc.wait(timeout_ms, call.signal)
            if outcome.aborted:
                return ToolResult(content=text("Error: tool call aborted"), is_error=True)
            policy = shared.policy(call, with_temp=False)
            return text(_render(shared, call, out, err, policy, workdir, timeout_ms, outcome))
        finally:
            for capture in (out, err):
                if capture.path.exists():  # not kept as the spill file
                    capture.discard()

    return define_tool(name="bash", description=DESCRIPTION, parameters=PARAMETERS, execute=execute)
