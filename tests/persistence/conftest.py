"""Fixtures for the store tests: one ``backend`` parameter per store kind, a child-process
spawner and a umask setter. Helpers live in ``store_support``.

``backend`` runs every conformance test against ``jsonl``, ``sqlite`` and ``postgres``. PostgreSQL
is used only when ``dsh.persistence.postgres`` imports and a server answers at
``$DSH_TEST_DATABASE_URL`` (default ``postgresql://127.0.0.1:5432/test``); each test then gets
its own schema, dropped afterwards.
"""

from __future__ import annotations

import importlib
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from store_support import PG_DSN, Backend, Child, spawn_child

from dsh.persistence.base import SessionStore


@cache
def postgres_skip_reason() -> str | None:
    try:
        importlib.import_module("dsh.persistence.postgres")
    except Exception as exc:  # not written yet, or its dependencies are missing
        return f"dsh.persistence.postgres does not import: {exc}"
    import psycopg

    try:
        with psycopg.connect(PG_DSN, connect_timeout=3):
            return None
    except Exception as exc:
        return f"no PostgreSQL answers at {PG_DSN}: {str(exc).splitlines()[0]}"


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    kind: str = request.param
    schema = None
    if kind == "jsonl":
        spec: dict[str, Any] = {"kind": kind, "root": str(tmp_path / "sessions")}
    elif kind == "sqlite":
        spec = {"kind": kind, "path": str(tmp_path / "db" / "sessions.sqlite")}
    else:
        reason = postgres_skip_reason()
        if reason is not None:
            pytest.skip(reason)
        schema = f"dsh_conf_{uuid.uuid4().hex[:12]}"
        spec = {"kind": kind, "dsn": PG_DSN, "schema": schema}
    backend = Backend(kind, spec)
    try:
        yield backend
    finally:
        for store in backend.stores:
            await store.close()
        if schema is not None:
            import psycopg

            with psycopg.connect(PG_DSN, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def store(backend: Backend) -> SessionStore:
    return backend.make()


Spawn = Callable[[dict[str, Any], str, str], Awaitable[Child]]


@pytest.fixture
async def children() -> AsyncIterator[Spawn]:
    spawned: list[Child] = []

    async def spawn(spec: dict[str, Any], action: str, session_id: str) -> Child:
        child = await spawn_child(spec, action, session_id)
        spawned.append(child)
        return child

    yield spawn
    for child in spawned:
        child.kill()
        await child.wait()


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    previous = os.umask(0o022)
    os.umask(previous)

    def set_mask(mask: int) -> None:
        os.umask(mask)

    yield set_mask
    os.umask(previous)
