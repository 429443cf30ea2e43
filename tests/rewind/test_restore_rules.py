"""The restore rule on real trees in a real shadow store: a folder swapped for a symlink is
never written through, even with ``force``; a file already as in the target is skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.rewind.restore import Conflict, apply_plan, make_plan
from dsh.rewind.store import ShadowStore


def _store(tmp_path: Path) -> tuple[ShadowStore, Path]:
    ws = tmp_path / "ws"
    (ws / "lib").mkdir(parents=True)
    (ws / "lib" / "x.txt").write_text("original\n")
    return ShadowStore(ws, home=tmp_path / "home"), ws


def test_a_folder_swapped_for_a_symlink_is_never_written_through(tmp_path: Path) -> None:
    store, ws = _store(tmp_path)
    target = store.snapshot("s").tree
    (ws / "lib" / "x.txt").write_text("agent\n")
    latest = store.snapshot("s").tree
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.txt").write_text("not yours\n")
    (ws / "lib").rename(ws / "lib.real")
    (ws / "lib").symlink_to(outside)
    now = store.snapshot("s").tree
    want, left, cur = store.entries(target), store.entries(latest), store.entries(now)
    touched = store.changed_paths(target, latest)
    with pytest.raises(Conflict, match=r"changed after the agent: lib/x\.txt"):
        make_plan(want, left, cur, touched, force=False)
    plan = make_plan(want, left, cur, touched, force=True)
    with pytest.raises(Conflict, match="changed after the agent: lib "):
        apply_plan(store, plan, want)
    assert (outside / "x.txt").read_text() == "not yours\n"


def test_a_path_already_restored_is_skipped(tmp_path: Path) -> None:
    store, ws = _store(tmp_path)
    target = store.snapshot("s").tree
    (ws / "lib" / "x.txt").write_text("agent\n")
    latest = store.snapshot("s").tree
    (ws / "lib" / "x.txt").write_text("original\n")  # as if a killed restore got this far
    now = store.snapshot("s").tree
    plan = make_plan(store.entries(target), store.entries(latest), store.entries(now),
                     store.changed_paths(target, latest), force=False)
    assert plan.paths == []
