"""Credentials in the endpoint URL (userinfo, ``?api-key=``, ``?token=``, ``?key=``) reach no
output, no file and no model request: through the real CLI against a loopback server that fails
a turn (the error line, ``turn/end.message``, the turn-outcome note in the next request) and
against a loopback port nobody listens on."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from tests.apps.conftest import run_dsh
from tests.llm.sse_server import Reply, SSEServer, chunk

from dsh._redact import redact_url, redact_urls

pytestmark = pytest.mark.attack

SECRETS = ("sk-url-Zq7uX9wK", "sk-q-Wv3kP2rT", "tok-Jh5mN8cY")
NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def _url(host_port: str) -> str:
    return f"http://dsh-user:{SECRETS[0]}@{host_port}/v1?api-key={SECRETS[1]}&token={SECRETS[2]}"


def _no_secret(name: str, data: str | bytes) -> None:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    for secret in SECRETS:
        assert secret not in text, f"{secret} leaked into {name}:\n{text[:2000]}"


def _no_secret_on_disk(*folders: Path) -> int:
    files = [p for folder in folders for p in folder.rglob("*") if p.is_file()]
    for path in files:
        _no_secret(str(path), path.read_bytes())
    return len(files)


def test_redaction_rules() -> None:
    assert redact_url("http://u:sk-x@host/v1") == "http://***@host/v1"
    assert redact_url("https://h/v1?api-key=a&model=m&access_token=b&sig=c&key=d#token=e") == (
        "https://h/v1?api-key=***&model=m&access_token=***&sig=***&key=***#token=***"
    )
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert redact_urls("x http://a:b@c:1/v1?token=t: failed (see http://d/?X-Amz-Signature=s).") == (
        "x http://***@c:1/v1?token=***: failed (see http://d/?X-Amz-Signature=***)."
    )


@pytest.mark.slow
def test_url_credentials_reach_no_output_file_or_request(tmp_path: Path) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    with SSEServer() as server:
        server.push(Reply.error(401, "Unauthorized"), Reply.sse([chunk(content="Fine."), chunk(finish="stop")]))
        url = _url(server.base_url.removeprefix("http://"))
        failed = run_dsh(["chat", "--plain", "--base-url", url, "--model", "m"], cwd, stdin="hello\n", **NO_PROXY)
        again = run_dsh(["run", "--continue", "--base-url", url, "--model", "m", "again"], cwd, **NO_PROXY)
        requests = list(server.requests)
    assert len(requests) == 2, failed.stderr + again.stderr  # both turns reached the server: not vacuous
    assert failed.returncode == 1 and again.returncode == 0, again.stderr
    assert "turn 1 step 1 failed: http://***@127.0.0.1:" in failed.stderr
    assert "api-key=***&token=***: authentication failed" in failed.stderr
    for name, result in (("chat", failed), ("run", again)):
        _no_secret(f"{name} stdout", result.stdout)
        _no_secret(f"{name} stderr", result.stderr)
    # The model is told about the failed turn, without the credentials.
    note = json.dumps(requests[1].json)
    assert "failed at step 1 with error AUTH" in note
    for n, request in enumerate(requests):
        _no_secret(f"request {n} body", request.body)
    home = Path(os.environ["DSH_HOME"])
    [log] = list(home.rglob("*.jsonl"))
    assert b'"kind":"error"' in log.read_bytes() and b"***@127.0.0.1" in log.read_bytes()
    assert _no_secret_on_disk(cwd, home) > 0
    for view in (["sessions", "show", log.stem, "--events"], ["sessions", "requests", log.stem, "--json"]):
        shown = run_dsh(view, cwd)
        assert shown.returncode == 0, shown.stderr
        _no_secret(" ".join(view[:2]), shown.stdout + shown.stderr)


@pytest.mark.slow
def test_url_credentials_stay_hidden_when_the_endpoint_is_unreachable(tmp_path: Path) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = _url(f"127.0.0.1:{port}")
    result = run_dsh(["run", "--base-url", url, "--model", "m", "--timeout", "5", "hi"], cwd, **NO_PROXY)
    assert result.returncode == 1, result.stderr
    assert "could not connect" in result.stderr and f"http://***@127.0.0.1:{port}/v1?api-key=***" in result.stderr
    _no_secret("stdout", result.stdout)
    _no_secret("stderr", result.stderr)
    assert _no_secret_on_disk(cwd, Path(os.environ["DSH_HOME"])) > 0
