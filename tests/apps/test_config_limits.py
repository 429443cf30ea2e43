"""What a hostile ``--config`` file can cost is bounded: a file over 1 MiB is refused before it
is parsed (a 30 MB one took over a minute and 1.3 GB), and a file under the limit stops being
composed at its 10,001st node (a 2.9 MB file of 200,000 keys took 36 s and was refused as an
alias bomb). Each refusal is one line naming the file and the limit, exit 2."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsh.runtime.plugin_list import MAX_CONFIG_BYTES, MAX_NODES, LoadError, load_config_file
from tests.apps.conftest import dsh_env, run_dsh

pytestmark = pytest.mark.attack

ADDRESS_SPACE = 1 << 30  # far below what parsing a 30 MB YAML took (1.3 GB resident)


def _keys(count: int) -> str:
    return "- id: clock\n  name: time-context\n  config:\n" + "".join(f"    k{i}: {i}\n" for i in range(count))


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _chat(config: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsh", "chat", "--config", config.name],
        input="hi\n", capture_output=True, text=True, cwd=cwd, env=dsh_env(), timeout=60,
        preexec_fn=_limited,
    )


def test_a_30_mb_config_is_refused_before_parsing(tmp_path: Path) -> None:
    config = tmp_path / "big.yml"
    text = _keys(2_000_000)
    config.write_text(text)
    size = config.stat().st_size
    assert size > 30_000_000
    out = _chat(config, tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert out.stderr == f"dsh: big.yml: config file is {size:,} bytes, over the 1 MiB limit; refused\n"
    assert not (tmp_path / ".sessions").exists()


def test_a_config_under_the_size_limit_stops_at_the_node_limit(tmp_path: Path) -> None:
    config = tmp_path / "many.yml"
    text = _keys(60_000)[:MAX_CONFIG_BYTES]
    config.write_text(text[: text.rindex("\n") + 1])
    assert config.stat().st_size <= MAX_CONFIG_BYTES
    out = _chat(config, tmp_path)
    assert out.returncode == 2, out.stderr
    [line] = out.stderr.splitlines()
    assert line.startswith("dsh: many.yml: line ")
    assert line.endswith(f"document has more than {MAX_NODES} nodes (a plugin list needs a few hundred); refused")


def test_a_config_that_is_a_stream_is_read_only_up_to_the_limit(tmp_path: Path) -> None:
    """``/dev/zero`` has no size to check first: it is read up to the limit, then refused (the
    CLI refuses anything but a regular file before this; the loader holds on its own)."""
    with pytest.raises(LoadError) as info:
        load_config_file("/dev/zero")
    assert str(info.value) == "/dev/zero: config file is over the 1 MiB limit; refused"
    out = run_dsh(["chat", "--config", "/dev/zero"], tmp_path, stdin="hi\n")
    assert (out.returncode, out.stderr) == (2, "dsh: config file /dev/zero not found\n")


def test_an_ordinary_config_still_loads(tmp_path: Path) -> None:
    config = tmp_path / "ok.yml"
    config.write_text(
        "- id: model\n  name: echo-llm\n- id: app\n  name: stdio-app\n"
        "  config: {model: mock-echo, persistenceRoot: ./.sessions}\n"
    )
    out = _chat(config, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ready.")


@pytest.mark.perf
@pytest.mark.parametrize("keys", [200_000, 60_000])
def test_hostile_configs_are_refused_quickly(tmp_path: Path, keys: int) -> None:
    config = tmp_path / "hostile.yml"
    text = _keys(keys)
    config.write_text(text if keys > 100_000 else text[: text.rindex("\n", 0, MAX_CONFIG_BYTES) + 1])
    started = time.perf_counter()
    out = _chat(config, tmp_path)
    elapsed = time.perf_counter() - started
    assert out.returncode == 2, out.stderr
    assert elapsed < 10, elapsed  # was 36 s for 200,000 keys; dsh's own start-up is most of this
