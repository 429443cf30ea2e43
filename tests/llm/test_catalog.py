"""The model catalog's typed API (``dsh.llm.catalog``) over the shipped ``catalog.toml``."""

from __future__ import annotations

import subprocess
import sys

from dsh.llm import catalog


def test_entries_are_typed_and_complete() -> None:
    names = catalog.names()
    providers = {name.partition(":")[0] for name in names}
    assert {"anthropic", "openai", "deepseek", "openrouter", "ollama"} <= providers
    for name in names:
        entry = catalog.lookup(name)
        assert entry is not None and entry.known and entry.name == name
        assert entry.context_window > 0 and 0 < entry.max_output <= entry.context_window
    sonnet = catalog.info("anthropic:claude-sonnet-4-5")
    assert (sonnet.context_window, sonnet.max_output, sonnet.reasoning) == (200000, 64000, True)


def test_bare_and_openai_compatible_names_find_the_one_entry_of_their_model() -> None:
    assert catalog.lookup("deepseek-v4-flash") == catalog.lookup("deepseek:deepseek-v4-flash")
    assert catalog.lookup("openai-compatible:gpt-4o") == catalog.lookup("openai:gpt-4o")
    assert catalog.lookup("ollama:gpt-4o") is None  # another provider's model is not guessed


def test_an_unknown_model_gets_the_defaults_and_one_note() -> None:
    entry = catalog.info("anthropic:claude-next")
    assert not entry.known and (entry.context_window, entry.max_output) == (128000, 8192)
    assert catalog.unknown_note("anthropic:claude-next") == (
        "anthropic:claude-next is not in dsh's model catalog: assuming a 128000-token context "
        "window and 8192 output tokens"
    )
    assert catalog.unknown_note("anthropic:claude-sonnet-4-5") is None
    assert catalog.unknown_note("mock-echo") is None  # the keyless default calls no endpoint


def test_the_catalog_is_read_on_first_use_not_at_import() -> None:
    probe = "import sys, dsh, dsh.llm.catalog\nprint('tomllib' in sys.modules, 'anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
