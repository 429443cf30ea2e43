"""``dsh run PROMPT``: one turn for scripts, like ``claude -p`` and ``codex exec``.

Owns sending the prompt as one turn of agent ``main`` (a new session, or ``--resume``/
``--continue``), waiting until the agent is idle and the log flushed, and printing the result in
one of three formats:

- ``text``: the final reply (the text of the turn's last assistant message) and a newline;
- ``json``: one object ``{"type":"result","sessionId","turn","model","reason","text","usage",
  "costUsd"}``, ``usage`` summed over the turn's steps, ``costUsd`` its price (``null`` when the
  price table does not know the model);
- ``stream-json``: every durable event of this run, one compact JSON line each (exactly its log
  line), written as it is appended, then nothing else.

The exit status is 0 only when the turn ended ``completed``; 130 when Ctrl-C or SIGTERM
cancelled it; 1 for any other end (error, max-tokens, rejected). Errors go to stderr as one line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

from dsh.apps import pipes
from dsh.apps.chat import load_app
from dsh.errors import UsageError
from dsh.runtime import Context
from dsh.session import Event, Session, encode_event

USAGE_KEYS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "reasoningTokens")


def read_prompt(args: argparse.Namespace) -> str:
    # A prompt piped in ends with the newline of its last line; that newline is not part of it.
    text: str = sys.stdin.read().removesuffix("\n") if args.prompt == "-" else args.prompt
    if not text.strip():
        raise UsageError("the prompt is empty (pass it as an argument, or - to read it from stdin)")
    return text


def cost_usd(events: list[Event], model: str | None) -> float | None:
    """The turn's cost in USD from the price table, ``None`` for a model it does not know."""
    from dsh.observability.cost import events_cost

    cost = events_cost(events, model)
    return None if cost is None else float(cost)


def summarise(events: list[Event]) -> dict[str, Any]:
    """The result of the turn among ``events`` (this run's events, in log order)."""
    turn: int | None = None
    reason: dict[str, Any] = {"kind": "unknown"}
    text = ""
    model: str | None = None
    usage: dict[str, int] = {}
    for event in events:
        data = event.data
        if event.type == "turn/start":
            turn = int(data.get("turn", 0))
        elif event.type == "request/header":
            config = (data.get("header") or {}).get("config") or {}
            model = config.get("model") if isinstance(config.get("model"), str) else model
        elif event.type == "assistant/message":
            step_text = "".join(
                str(b.get("text", "")) for b in data.get("content") or () if b.get("type") == "text"
            )
            if step_text:
                text = step_text
            for key, value in (data.get("usage") or {}).items():
                if key in USAGE_KEYS and isinstance(value, int):
                    usage[key] = usage.get(key, 0) + value
        elif event.type == "turn/end":
            raw = data.get("reason")
            reason = dict(raw) if isinstance(raw, dict) else reason
    return {"turn": turn, "model": model, "reason": reason, "text": text, "usage": usage}


async def cmd_run(args: argparse.Namespace) -> int:
    """``dsh run``: ``dsh chat``'s composition (:func:`dsh.apps.chat.load_app`), one turn."""
    prompt = read_prompt(args)
    fmt: str = args.output_format
    out = sys.stdout
    ctx = Context()
    cancelled = False
    try:
        app = await load_app(ctx, args)
        agent = app.agent
        session: Session = agent.session
        mine: list[Event] = []

        def record(source: Session, event: Event) -> None:
            if source is not session:
                return
            mine.append(event)
            if fmt == "stream-json" and not app.output_closed:
                try:
                    out.write(encode_event(event).decode() + "\n")
                    out.flush()
                except BrokenPipeError:
                    app._output_gone()

        ctx.defer(ctx.on("session/event", record))
        loop = asyncio.get_running_loop()

        def interrupt() -> None:
            nonlocal cancelled
            cancelled = True
            agent.cancel("interrupted by the user")

        installed = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(signum, interrupt)
                installed.append(signum)
            except (NotImplementedError, RuntimeError):
                pass
        try:
            agent.send([{"type": "text", "text": prompt}], source=app.prompt_source())
            app.submitted = True
            await app.settle()
        finally:
            for signum in installed:
                loop.remove_signal_handler(signum)
        result = summarise(mine)
        result["model"] = result["model"] or app.config.model
        result["sessionId"] = session.id
    finally:
        await ctx.dispose()
    if app.output_closed:
        return pipes.EXIT_PIPE
    if fmt == "text":
        if result["text"]:
            out.write(result["text"] if result["text"].endswith("\n") else result["text"] + "\n")
    elif fmt == "json":
        ordered = {"type": "result", "sessionId": result["sessionId"], "turn": result["turn"],
                   "model": result["model"], "reason": result["reason"], "text": result["text"],
                   "usage": result["usage"], "costUsd": cost_usd(mine, result["model"])}
        out.write(json.dumps(ordered, ensure_ascii=False) + "\n")
    out.flush()
    kind = result["reason"].get("kind")
    if kind == "completed":
        return 0
    if cancelled and kind == "aborted":
        return 130
    if kind != "error":  # an error already logged its own line; say why the others failed
        print(f'dsh: turn ended "{kind}" (session {result["sessionId"]})', file=sys.stderr)
    return 1
