"""``provider:model`` names through the real CLI and the library: which adapter, endpoint and key
each provider picks, in which order the endpoint is overridden, and the one-line refusals for a
missing key, a missing extra, a provider that needs ``--base-url`` and a local server that is
not running.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from anthropic_server import reply, text
from sse_server import Reply, SSEServer, chunk
from tests.apps.conftest import dsh_env, run_dsh

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    cwd = tmp_path / "project"
    cwd.mkdir()
    return cwd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def ok(server: SSEServer) -> None:
    server.push(Reply.sse([chunk(content="fine"), chunk(finish="stop")]))


@pytest.mark.parametrize(
    ("model", "variable"),
    [("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"), ("openai:gpt-4o", "OPENAI_API_KEY"),
     ("deepseek:deepseek-chat", "DEEPSEEK_API_KEY"), ("openrouter:openai/gpt-5", "OPENROUTER_API_KEY")],
)
def test_a_missing_key_is_one_line_naming_the_variable(workdir: Path, model: str, variable: str) -> None:
    out = run_dsh(["run", "hi", "--model", model], workdir)
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [f"dsh: {model} needs an API key: set {variable}"]


def test_openai_compatible_needs_a_base_url(workdir: Path) -> None:
    out = run_dsh(["run", "hi", "--model", "openai-compatible:m"], workdir)
    assert out.returncode == 2
    assert out.stderr.splitlines() == ['dsh: "openai-compatible:" models need --base-url URL (the server that serves them)']


@pytest.mark.slow
def test_without_the_anthropic_extra_one_line_names_it(workdir: Path, tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    # Python then finds no "anthropic" at all, as when the extra is not installed.
    (shadow / "sitecustomize.py").write_text("import sys\nsys.modules['anthropic'] = None\n")
    out = run_dsh(["run", "hi", "--model", "anthropic:claude-sonnet-4-5"], workdir,
                  ANTHROPIC_API_KEY="k", PYTHONPATH=str(shadow))
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        'dsh: anthropic:claude-sonnet-4-5 needs the optional extra dsh[anthropic], which is not installed '
        '(pip install "dsh[anthropic]", or uv sync --extra anthropic)'
    ]


@pytest.mark.slow
def test_ollama_without_a_server_names_the_url_it_tried(workdir: Path) -> None:
    port = free_port()
    out = run_dsh(["run", "hi", "--model", "ollama:qwen3"], workdir, OLLAMA_HOST=f"127.0.0.1:{port}", timeout=120)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    [line] = [x for x in out.stderr.splitlines() if x.startswith("dsh:")]
    assert f"failed: http://127.0.0.1:{port}/v1: could not connect after 3 attempts" in line


@pytest.mark.slow
def test_ollama_default_url_is_the_local_one(workdir: Path) -> None:
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 11434)) == 0:
            pytest.skip("something listens on Ollama's port 11434 here")
    out = run_dsh(["run", "hi", "--model", "ollama:qwen3"], workdir, timeout=120)
    assert out.returncode == 1
    assert "failed: http://127.0.0.1:11434/v1: could not connect" in out.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_endpoint_order_is_base_url_then_the_providers_variable_then_its_default(workdir: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with SSEServer() as server:
        # The provider's variable names the endpoint; the model goes out without its prefix,
        # with the provider's key.
        ok(server)
        out = run_dsh(["run", "hi", "--model", "openai:gpt-4o"], workdir, OPENAI_API_KEY="sk-o",
                      OPENAI_BASE_URL=server.base_url, **NO_PROXY)
        assert (out.returncode, out.stdout) == (0, "fine\n"), out.stderr
        first = server.requests[-1]
        assert first.json["model"] == "gpt-4o"
        assert first.headers["authorization"] == "Bearer sk-o"
        # --base-url wins over the variable.
        ok(server)
        out = run_dsh(["run", "hi", "--model", "deepseek:deepseek-chat", "--base-url", server.base_url],
                      workdir, DEEPSEEK_API_KEY="sk-d", DEEPSEEK_BASE_URL=dead, **NO_PROXY)
        assert (out.returncode, out.stdout) == (0, "fine\n"), out.stderr
        assert server.requests[-1].json["model"] == "deepseek-chat"
        assert server.requests[-1].headers["authorization"] == "Bearer sk-d"
        # A bare name keeps today's meaning: openai-llm at --base-url, the name sent as is,
        # and an Ollama tag with a colon is no provider.
        ok(server)
        out = run_dsh(["run", "hi", "--model", "qwen3:8b", "--base-url", server.base_url], workdir, **NO_PROXY)
        assert out.returncode == 0, out.stderr
        assert server.requests[-1].json["model"] == "qwen3:8b"
    # The error line names the endpoint the variable chose (never a public address here).
    out = run_dsh(["run", "hi", "--model", "openai:gpt-4o", "--timeout", "5"], workdir,
                  OPENAI_API_KEY="sk-o", OPENAI_BASE_URL=dead, timeout=120)
    assert dead in out.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_config_names_the_model_as_provider_model(workdir: Path) -> None:
    with SSEServer() as server:
        server.push(reply([text("from config")]))
        (workdir / "dsh.yaml").write_text(textwrap.dedent(f"""\
            - id: claude
              name: anthropic-llm
              config: {{models: ["anthropic:claude-haiku-4-5"], baseURL: "{server.base_url}", apiKey: k, thinking: disabled}}
            - id: app
              name: stdio-app
              config: {{model: "anthropic:claude-haiku-4-5"}}
            """))
        out = run_dsh(["run", "hi", "--config", "dsh.yaml"], workdir, **NO_PROXY)
        assert (out.returncode, out.stdout) == (0, "from config\n"), out.stderr
        body = server.requests[0].json
        assert body["model"] == "claude-haiku-4-5" and "thinking" not in body


@pytest.mark.slow
def test_library_agent_with_an_anthropic_model_works_as_the_cli(workdir: Path) -> None:
    with SSEServer() as server:
        server.push(reply([text("library ok")], usage={"cache_read_input_tokens": 7}))
        script = textwrap.dedent("""\
            import dsh
            agent = dsh.Agent(model="anthropic:claude-sonnet-4-5", store="./s", time_context=False)
            result = agent.run_sync("hi", session_id="lib")
            usage = [e.data.get("usage") for e in result.events if e.type == "assistant/message"]
            print(result.text, usage)
        """)
        out = subprocess.run(
            [sys.executable, "-c", script], cwd=workdir, capture_output=True, text=True, timeout=60,
            env=dsh_env(ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=server.base_url, **NO_PROXY),
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "library ok [{'inputTokens': 10, 'outputTokens': 9, 'cacheReadTokens': 7}]"
        body = server.requests[0].json
        assert body["model"] == "claude-sonnet-4-5"
        assert json.dumps(body["messages"][-1]["content"][-1]["cache_control"]) == '{"type": "ephemeral"}'
