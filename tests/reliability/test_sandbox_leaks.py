"""What the commands the model runs can take from, or leave on, the machine, through the real
``dsh run`` with a scripted model: the API keys in the shell's environment, shared temp folders
another local user prepared (pre-created 0777, session folder swapped for a symlink to the
victim's folder), and spill files (capped per call and per session, removed at exit).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.sandbox_support import NO_PROXY, attack, bash
from tests.reliability.support import dsh_env
from tests.tools.workspace.ws_support import needs_bwrap

pytestmark = [pytest.mark.attack, pytest.mark.slow, needs_bwrap]

SECRETS = {
    "OPENAI_API_KEY": "sk-openai-secret-1111",
    "MY_TOKEN": "tok-secret-2222",
    "Db_Password": "pw-secret-3333",
    "LLM_CRED": "cred-secret-4444",  # the configured apiKeyEnv: no secret-looking name
    "COPY_OF_CRED": "cred-secret-4444",  # the same value under another name
}
PASSED = {"MY_PASSTHROUGH_KEY": "passed-5555", "PLAIN_SETTING": "plain-6666"}


def test_the_shell_environment_has_no_secrets(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    config = (
        "- {id: llm, name: openai-llm, config: {models: [test-model], baseURL: '{base_url}', apiKeyEnv: LLM_CRED}}\n"
        "- id: ws\n  name: workspace-tools\n  config:\n"
        "    shellEnvironment: {passthrough: ['MY_PASSTHROUGH_*'], set: {FIXED: fixed-7777}}\n"
        "- {id: app, name: stdio-app, config: {model: test-model}}\n"
    )
    steps = [
        bash("env"),
        bash("env", run_in_background=True),
        ("job_output", {"job_id": "bash-1", "wait": True}),
    ]
    run = attack(ws, steps, config=config, **SECRETS, **PASSED)
    assert run.result.returncode == 0, run
    for shown in (run.texts[0], run.texts[2]):
        assert "MY_PASSTHROUGH_KEY=passed-5555" in shown and "PLAIN_SETTING=plain-6666" in shown, run
        assert "FIXED=fixed-7777" in shown and "DSH_SESSION_ID=" in shown, run
        for name in SECRETS:
            assert f"\n{name}=" not in "\n" + shown, (name, shown)
    for value in SECRETS.values():
        assert value not in run.log and all(value not in text for text in run.texts), value


def _resume_id(cwd: Path, **env: str) -> str:
    first = subprocess.run(
        [sys.executable, "-m", "dsh", "run", "hello", "--output-format", "json"],
        cwd=cwd, env=dsh_env(**env), capture_output=True, text=True, timeout=60, check=False,
    )
    assert first.returncode == 0, first.stderr
    return str(json.loads(first.stdout)["sessionId"])


def test_prepared_shared_temp_folders_do_not_redirect_the_session(tmp_path: Path) -> None:
    """The folders another user could prepare in a shared temp dir (the names dsh used to
    reuse) are never used: the session's TMPDIR and spill files land in fresh private folders,
    and the victim's folder stays untouched."""
    ws = tmp_path / "ws"
    ws.mkdir()
    shared_tmp = tmp_path / "shared-tmp"
    shared_tmp.mkdir()
    shared_tmp.chmod(0o1777)
    victim = tmp_path / "victim-home"
    victim.mkdir()
    env = {"TMPDIR": str(shared_tmp), "XDG_RUNTIME_DIR": ""}
    session = _resume_id(ws, **env)
    uid = os.getuid()
    for kind in ("sandbox", "spill"):
        planted = shared_tmp / f"dsh-{kind}-{uid}"
        planted.mkdir()
        planted.chmod(0o777)
        (planted / session).symlink_to(victim)  # the swap, done ahead of time
    steps = [
        bash('echo pwned > "$TMPDIR/pwned"; echo "$TMPDIR"'),
        bash("seq 1 100000"),  # spilled: more than maxOutputBytes
        bash('ls -ld "$TMPDIR" | cut -c1-10'),
    ]
    run = attack(ws, steps, args=["--resume", session], **env)
    assert run.result.returncode == 0, run
    assert list(victim.iterdir()) == []
    temp = Path(run.texts[0].strip())
    assert temp.parent.parent == shared_tmp and temp.parent.name.startswith("dsh-sandbox-"), run
    assert run.texts[2] == "drwx------\n", run
    spill = re.search(r"full output: (\S+)\]", run.texts[1])
    assert spill is not None, run
    assert Path(spill[1]).parent.parent.name.startswith("dsh-spill-"), run
    assert not os.path.realpath(spill[1]).startswith(str(victim)), run
    # The session is over: its private folders are gone, the planted ones are left alone.
    assert sorted(p.name for p in shared_tmp.iterdir()) == [f"dsh-sandbox-{uid}", f"dsh-spill-{uid}"]


def _spill_config(spill: Path, per_call: int, per_session: int) -> str:
    return (
        "- {id: llm, name: openai-llm, config: {models: [test-model], baseURL: '{base_url}', apiKey: none}}\n"
        f"- {{id: ws, name: workspace-tools, config: {{spillDir: '{spill}', maxSpillBytes: {per_call}, "
        f"maxSessionSpillBytes: {per_session}}}}}\n"
        "- {id: app, name: stdio-app, config: {model: test-model}}\n"
    )


def _disk(folder: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def test_spill_is_capped_and_removed_at_exit(tmp_path: Path) -> None:
    """``yes | head -c 200M`` keeps at most the per-call cap (default 64 MiB) on disk, the
    model is told what was kept, and the folders are gone once ``dsh run`` exits."""
    ws = tmp_path / "ws"
    ws.mkdir()
    spill = tmp_path / "spill"
    config = (
        "- {id: llm, name: openai-llm, config: {models: [test-model], baseURL: '{base_url}', apiKey: none}}\n"
        f"- {{id: ws, name: workspace-tools, config: {{spillDir: '{spill}'}}}}\n"
        "- {id: app, name: stdio-app, config: {model: test-model}}\n"
    )
    steps = [
        bash("yes | head -c 200M"),
        bash(f"find {spill} -type f -printf '%s\\n'; echo \"$TMPDIR\""),
    ]
    run = attack(ws, steps, config=config)
    assert run.result.returncode == 0, run
    cap = 64 * 1024 * 1024
    marker = run.texts[0].splitlines()[-1]
    assert marker.startswith(f"[output truncated; the first {cap} of {200 * 1024 * 1024} bytes were kept in "), run
    assert marker.endswith(f" (spill cap: {cap} bytes per call, {256 * 1024 * 1024} per session)]"), run
    # Non-empty files only: the find call's own (still empty) output files are there too.
    sizes = [int(line) for line in run.texts[1].splitlines()[:-1] if line != "0"]
    assert sizes == [cap], run
    temp = Path(run.texts[1].splitlines()[-1])
    assert not temp.exists() and not temp.parent.exists(), run
    assert list(spill.iterdir()) == [], run


def test_spill_cap_per_session_and_for_jobs(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    spill = tmp_path / "spill"
    mib = 1024 * 1024
    steps = [
        bash("head -c 3M /dev/zero | tr '\\0' a"),
        bash("head -c 3M /dev/zero | tr '\\0' b"),
        bash("head -c 3M /dev/zero | tr '\\0' c"),
        bash("head -c 3M /dev/zero | tr '\\0' d; echo; echo last line"),
        bash("head -c 3M /dev/zero | tr '\\0' e; echo; echo job end", run_in_background=True),
        ("job_output", {"job_id": "bash-1", "wait": True}),
        bash(f"find {spill} -type f -printf '%s\\n' | sort -n"),
    ]
    run = attack(ws, steps, config=_spill_config(spill, 2 * mib, 5 * mib))
    assert run.result.returncode == 0, run
    caps = f"(spill cap: {2 * mib} bytes per call, {5 * mib} per session)"
    assert run.texts[0].endswith(f"bytes were kept in {run.texts[0].split(' kept in ')[1].split(' ')[0]} {caps}]\n")
    assert f"the first {2 * mib} of {3 * mib} bytes" in run.texts[0], run
    assert f"the first {2 * mib} of {3 * mib} bytes" in run.texts[1], run
    assert f"the first {1 * mib} of {3 * mib} bytes" in run.texts[2], run
    assert run.texts[3].endswith(f"last line\n[output truncated; full output not saved {caps[:-1]}, used up)]\n"), run
    assert run.texts[5].startswith(f"[earlier output omitted; full output not saved {caps[:-1]}, used up)]\n"), run
    assert run.texts[5].endswith("job end\n[status: completed, exit code: 0]"), run
    assert [int(s) for s in run.texts[6].split() if s != "0"] == [mib, 2 * mib, 2 * mib], run
    assert list(spill.iterdir()) == [], run


def test_spill_folder_is_private_in_a_shared_base(tmp_path: Path) -> None:
    """A configured base another user can write to (no sticky bit) is refused in one line."""
    ws = tmp_path / "ws"
    ws.mkdir()
    spill = tmp_path / "open"
    spill.mkdir()
    spill.chmod(0o777)
    os.chown(spill, 65534, 65534)
    run = attack(ws, [bash("seq 1 100000")], config=_spill_config(spill, 1024 * 1024, 4 * 1024 * 1024))
    assert run.result.returncode == 0, run
    assert run.texts[0] == (
        f"Error: cannot use {str(spill)!r} for private files: others can write there and it has no sticky bit"
    ), run
    assert stat.S_IMODE(spill.stat().st_mode) == 0o777 and list(spill.iterdir()) == []
    assert NO_PROXY  # the loopback model is reached directly
