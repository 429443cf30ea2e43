"""Compaction's default threshold comes from the model catalog: the real ``dsh chat`` with a
``compact`` entry that sets no ``contextWindow``, against a loopback chat-completions server.

``thresholdRatio`` 0.01 makes the threshold 409 tokens for ``ollama:qwen3`` (the catalog's
40960-token window) and 1280 for a model the catalog lacks (its 128000-token default); the same
two turns of about 250 tokens each compact the first turn under the first model and not under
the second.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from sse_server import Reply, SSEServer, chunk
from tests.apps.conftest import run_dsh, session_files

NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
CONFIG = """\
- id: llm
  name: openai-llm
  config: {{models: ["{model}"], baseURL: "{url}", apiKey: k}}
- id: compact
  name: compact
  config: {{thresholdRatio: 0.01, retainTokens: 0, summarizationModel: "", maxTokens: 100, compactionRetries: 0}}
- id: app
  name: stdio-app
  config: {{model: "{model}", persistenceRoot: "{root}"}}
"""
PROMPT = "x" * 1000  # 250 estimated tokens


def compactions(workdir: Path, model: str, tmp_path: Path) -> tuple[list[str], int]:
    root = tmp_path / model.replace(":", "_")
    with SSEServer() as server:
        server.push(*[Reply.sse([chunk(content="ok"), chunk(finish="stop")]) for _ in range(3)])
        (workdir / "c.yaml").write_text(textwrap.dedent(CONFIG.format(model=model, url=server.base_url, root=root)))
        for resume in ([], ["--continue"]):  # two turns, one process each
            out = run_dsh(["run", PROMPT, "--config", "c.yaml", *resume], workdir, **NO_PROXY)
            assert out.returncode == 0, out.stderr
        requests = len(server.requests)
    [log] = session_files(workdir, root)
    events = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    return [e["type"] for e in events if e["type"].startswith("compact/")], requests


@pytest.mark.slow
def test_the_threshold_comes_from_the_catalog_window_of_the_agents_model(workdir: Path, tmp_path: Path) -> None:
    kinds, requests = compactions(workdir, "ollama:qwen3", tmp_path)
    assert kinds == ["compact/start", "compact/summary", "compact/end"]
    assert requests == 3  # two replies and the summary
    kinds, requests = compactions(workdir, "ollama:not-in-the-catalog", tmp_path)
    assert kinds == []
    assert requests == 2


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    cwd = tmp_path / "project"
    cwd.mkdir()
    return cwd
