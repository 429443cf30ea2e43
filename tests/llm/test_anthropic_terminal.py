"""Terminal mode with ``anthropic:`` models, through a real pseudo-terminal: the usage line and
``/usage`` with the cache share, ``/model`` completion from the catalog, the unknown-model note,
and one session that moves between providers with ``/model`` and keeps a valid history.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic_server import reply, text, thinking
from sse_server import Reply, SSEServer, chunk, usage_chunk
from tests.apps.conftest import session_files
from tests.apps.pty_screen import Terminal

pytestmark = [pytest.mark.pty, pytest.mark.slow]

MODEL = "anthropic:claude-sonnet-4-5"
NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    cwd = tmp_path / "project"
    cwd.mkdir()
    return cwd


def _events(workdir: Path) -> list[dict[str, Any]]:
    [log] = session_files(workdir)
    return [json.loads(line) for line in log.read_text().splitlines()[1:]]


def test_cache_share_model_completion_and_a_provider_switch_keep_a_valid_history(workdir: Path) -> None:
    with SSEServer() as claude, SSEServer() as local:
        claude.push(
            reply([thinking("Thinking in Claude.", "sig-A"), text("Hello from Claude.")],
                  usage={"input_tokens": 100, "cache_read_input_tokens": 900}),
            reply([text("Back on Claude.")]),
        )
        local.push(Reply.sse([
            chunk(reasoning="Thinking in Qwen."), chunk(content="Hello from Qwen."), chunk(finish="stop"),
            usage_chunk({"prompt_tokens": 50, "completion_tokens": 7,
                         "prompt_tokens_details": {"cached_tokens": 40}}),
        ]))
        term = Terminal(
            ["chat", "--model", MODEL], workdir, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=claude.base_url,
            OLLAMA_HOST=f"127.0.0.1:{local.port}", **NO_PROXY,
        )
        term.expect("Ctrl-D to leave")
        assert "not in dsh's model catalog" not in term.text()  # a catalog model: no note
        term.type("hi\r")
        term.expect(f"{MODEL} · turn 1 · 100 in · 9 out · 900 cached (90% of input) ·")
        term.type("/usage\r")
        screen = term.expect("(90% of input)", count=2).replace("\n", "")  # a long line wraps
        assert f"1 model calls · {MODEL} · 1 turns · 100 in · 9 out · 900 cached (90% of input)" in screen
        # /model completes catalog names of every provider, not only what is served now.
        term.type("/model ollama:qw")
        term.expect("ollama:qwen3")
        term.type("en3\r")
        term.expect("model: ollama:qwen3 from the next request")
        term.type("again\r")
        term.expect("ollama:qwen3 · turn 2 · 10 in · 7 out · 40 cached (80% of input) ·")
        term.type("/model ollama:mystery-model\r")
        screen = term.expect("output tokens").replace("\n", "")
        assert "ollama:mystery-model is not in dsh's model catalog: assuming a 128000-token context window" in screen
        term.type(f"/model {MODEL}\r")
        term.expect(f"model: {MODEL} from the next request")
        term.type("third\r")
        term.expect(f"{MODEL} · turn 3 ·")
        term.type("\x04")
        assert term.wait() == 0

    # On the chat-completions server: Claude's reply as plain assistant text (no tool calls, so
    # no reasoning_content), no signature anywhere.
    [qwen] = [r.json for r in local.requests]
    assert qwen["model"] == "qwen3"
    assert qwen["messages"][0]["role"] == "system"
    assert {"role": "assistant", "content": "Hello from Claude."} in qwen["messages"]
    assert "sig-A" not in json.dumps(qwen)
    # Back on Claude: its own thinking block goes back with its signature; Qwen's reasoning
    # (no signature) is not sent; roles alternate, user first and last.
    first, last = (r.json for r in claude.requests)
    roles = [m["role"] for m in last["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert last["messages"][1]["content"][0] == {"type": "thinking", "thinking": "Thinking in Claude.", "signature": "sig-A"}
    assert last["messages"][3]["content"] == [{"type": "text", "text": "Hello from Qwen."}]
    assert "Thinking in Qwen." not in json.dumps(last)
    # The same first message (its cache mark aside: the previous request was Qwen's, whose end
    # now carries mark 3).
    unmarked = [{k: v for k, v in b.items() if k != "cache_control"} for b in first["messages"][0]["content"]]
    assert last["messages"][0]["content"] == unmarked
    # The log keeps every block of both providers.
    reasoning = [b for e in _events(workdir) if e["type"] == "assistant/message"
                 for b in e["data"]["content"] if b["type"] == "reasoning"]
    assert [b["text"] for b in reasoning] == ["Thinking in Claude.", "Thinking in Qwen."]
    headers = [e["data"]["header"]["config"]["model"] for e in _events(workdir) if e["type"] == "request/header"]
    assert headers == [MODEL, "ollama:qwen3", MODEL]
