"""A child process for the store tests: ``_child.py <spec-json> <action> <session-id>``.

Actions:
- ``hold``: ``load`` the session (taking its writer lock), print ``ready``, sleep until killed.
- ``hold-new``: ``create`` the session (lock, nothing written), print ``ready``, sleep.
- ``try-load`` / ``try-create``: attempt it and print ``ok`` or the error's class name and text.
- ``read``: print ``ok <event count>`` or the error.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from store_support import build_store


async def main() -> None:
    spec = json.loads(sys.argv[1])
    action, session_id = sys.argv[2], sys.argv[3]
    store = build_store(spec)
    try:
        if action == "hold":
            await store.load(session_id)
            print("ready", flush=True)
            await asyncio.sleep(3600)  # holds the lock until killed (the cap ends an orphan)
        elif action == "hold-new":
            await store.create({"version": 0, "id": session_id, "createdAt": 1})
            print("ready", flush=True)
            await asyncio.sleep(3600)  # holds the lock until killed (the cap ends an orphan)
        else:
            try:
                if action == "try-load":
                    await store.load(session_id)
                    print("ok", flush=True)
                elif action == "try-create":
                    await store.create({"version": 0, "id": session_id, "createdAt": 1})
                    print("ok", flush=True)
                elif action == "read":
                    stored = await store.read(session_id)
                    print(f"ok {len(stored.events)}", flush=True)
                else:
                    raise SystemExit(f"unknown action {action}")
            except Exception as exc:
                print(f"{type(exc).__name__}: {exc}", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
