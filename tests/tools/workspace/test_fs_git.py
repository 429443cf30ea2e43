"""``write``/``edit`` into the repository's git metadata need approval in the confined modes,
through the real ``dsh run`` (no one to ask) and a scripted model on loopback: a hook in
``.git/hooks`` or a ``core.fsmonitor`` line in ``.git/config`` would run unconfined at the user's
next git command. The files stay as they were; a write elsewhere in the workspace still works."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cli_support import NO_PROXY, calls, done, model_args, tool_results
from tests.apps.conftest import run_dsh
from tests.llm.sse_server import SSEServer

pytestmark = [pytest.mark.attack, pytest.mark.slow]

GIT_NOTE = (
    'is git metadata, read-only in workspace-write mode unless approved (git runs its hooks and '
    "config outside the sandbox)"
)


@pytest.mark.parametrize(
    ("approval", "outcome"),
    [
        ("ask", 'approval unavailable: "{tool}" requires approval and no one can answer (no interactive answerer); the call was not run'),
        ("never", 'approval rejected: the "{tool}" call was not run (rejected by the user or by the approval policy)'),
    ],
    ids=["ask-no-asker", "never"],
)
def test_git_metadata_writes_are_refused_without_approval(tmp_path: Path, approval: str, outcome: str) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    config = (repo / ".git" / "config").read_bytes()
    hook = repo / ".git" / "hooks" / "pre-commit"
    attempts = [
        ("write", {"file_path": ".git/hooks/pre-commit", "content": "#!/bin/sh\ntouch /tmp/owned\n"}),
        ("read", {"file_path": ".git/config"}),
        ("write", {"file_path": ".git/config", "content": "[core]\n\tfsmonitor = touch /tmp/owned\n"}),
        ("edit", {"file_path": ".git/config", "old_string": "[core]", "new_string": "[core]\n\tfsmonitor = id"}),
        ("write", {"file_path": f"{repo}/.git/info/../hooks/post-checkout", "content": "#!/bin/sh\n"}),
        ("write", {"file_path": "notes.txt", "content": "still fine\n"}),
    ]
    with SSEServer() as server:
        server.push(calls(*attempts))
        server.push(done())
        result = run_dsh(
            ["run", "install a hook", "--approval", approval, *model_args(server.base_url)], repo, **NO_PROXY,
        )
    assert result.returncode == 0, result.stderr
    results = tool_results(repo)
    assert [name for name, _, _ in results] == [name for name, _ in attempts]
    shown = [".git/hooks/pre-commit", None, ".git/config", ".git/config", ".git/hooks/post-checkout"]
    for (name, _), where, (_, text, is_error) in zip(attempts, shown, results, strict=False):
        if where is None:
            assert not is_error, text  # reading git metadata stays allowed
            continue
        assert is_error
        assert text == f'Error: {outcome.format(tool=name)} — "{where}" {GIT_NOTE}', text
    assert results[-1] == ("write", "Created notes.txt (1 lines, 11 bytes)", False)
    assert not hook.exists() and not (repo / ".git" / "hooks" / "post-checkout").exists()
    assert (repo / ".git" / "config").read_bytes() == config
