"""The summariser: its system prompt and the one direct model call that writes a summary.

The call is not a loop step: one request to the ``llm`` service, collected here, stopped by the
caller's abort signal even when the adapter ignores it. Only text comes back; an error, abort,
``max-tokens`` finish or empty text is a :class:`CompactionError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from dsh.llm.assembler import ChunkAssembler
from dsh.llm.service import LlmService
from dsh.llm.types import LlmRequest
from dsh.plugins.compact.result import CompactionError
from dsh.plugins.compact.transcript import summarizer_prompt
from dsh.runtime import AbortSignal, run_cancellable
from dsh.session.vocab import TextBlock

__all__ = ["SUMMARIZER_SYSTEM_PROMPT", "summarize"]

SUMMARIZER_SYSTEM_PROMPT: Final = """\
You condense the transcript of an AI agent's working session into a checkpoint. Another model \
will continue the work from your checkpoint alone, so keep everything it needs and drop the rest.

Write exactly these Markdown sections, in this order, with terse bullets. Write "(none)" under \
a section that has nothing; never leave a section out.

## Primary Request and Intent
- [what the user wants, including how the request evolved; quote wording that matters]

## Key Technical Concepts
- [technologies, conventions and constraints in play]

## Files and Code
- [exact path: why it matters, what changed, key snippets]

## Errors and Fixes
- [each error and how it was resolved, with the user's feedback on it]

## Dates, Times and Deadlines
- [every date, time, time zone, duration and deadline mentioned, exactly as written, and when \
the key events of the session happened]

## Pending Tasks
- [work that was asked for and is not done yet]

## Current Work
- [what was in progress when the transcript ends]

## Next Step
- [the one next action in line with the latest request, or "(none)"]

## Critical Context
- [decisions and their reasons, user preferences, open questions, data needed to continue]

Rules:
- Keep every date, time, time zone, deadline and duration verbatim, with what it refers to. \
[Context: Time sampled …] lines and "Covers … to …" lines are wall-clock readings: use them to \
say when things happened, and never turn an absolute time into a relative one.
- Keep exact file paths, commands, identifiers, numbers, error messages and signatures.
- Record the user's instructions and corrections faithfully.
- Do not mention this summarisation or that the conversation was condensed.
- A <compacted-summary> block in the transcript is an earlier checkpoint: merge it with the newer \
messages into one consolidated summary; keep facts that still hold (and their dates), drop stale \
ones, and do not copy it verbatim."""


async def summarize(
    llm: LlmService,
    transcript: str,
    *,
    model: str,
    max_tokens: int,
    session_id: str,
    signal: AbortSignal | None,
) -> list[TextBlock]:
    """The summary of ``transcript``: the text blocks of one summariser call."""
    request = LlmRequest(
        model=model,
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": summarizer_prompt(transcript)}],
            }
        ],
        system=SUMMARIZER_SYSTEM_PROMPT,
        max_tokens=max_tokens,
        session_id=session_id,
        signal=signal,
    )
    assembler = await _collect(llm, request, signal)
    finish: Mapping[str, object] = assembler.finish
    kind = finish.get("kind")
    if kind == "error":
        raise CompactionError(f"summarization failed: {finish.get('message', 'model error')}")
    if kind == "aborted":
        raise CompactionError("summarization aborted: the model stream was aborted")
    if kind == "max-tokens":
        raise CompactionError(f"summarization stopped at the maxTokens limit ({max_tokens})")
    summary: list[TextBlock] = [
        {"type": "text", "text": block["text"]}
        for block in assembler.blocks()
        if block["type"] == "text"
    ]
    if not any(block["text"].strip() for block in summary):
        raise CompactionError("summarization returned no text")
    return summary


async def _collect(
    llm: LlmService, request: LlmRequest, signal: AbortSignal | None
) -> ChunkAssembler:
    """Collect the stream; an abort stops it even if the adapter ignores it."""

    def aborted() -> CompactionError:
        reason = signal.reason if signal is not None else None
        return CompactionError(f"summarization aborted: {reason}")

    if signal is not None and signal.aborted:
        raise aborted()

    async def collect() -> ChunkAssembler:
        assembler = ChunkAssembler()
        async for chunk in llm.stream(request):
            if signal is not None and signal.aborted:
                raise aborted()
            assembler.push(chunk)
        return assembler

    if signal is None:
        return await collect()
    return await run_cancellable(collect(), signal, aborted)
