"""The ``compact`` plugin entry: ``name``, ``inject`` and ``apply`` (see README.md)."""

from __future__ import annotations

import asyncio

from dsh.agent.hooks import PRE_STEP
from dsh.plugins.compact.compactor import COMPACT, Compactor
from dsh.plugins.compact.config import Config
from dsh.plugins.compact.estimate import DeepSeekCounter, Estimator, load_deepseek_tokenizer
from dsh.runtime import Context

__all__ = ["Config", "apply", "inject", "name"]

name = "compact"
inject = ["agents", "llm", "sessions"]


async def apply(ctx: Context, config: Config) -> None:
    estimator: Estimator | None = None
    if config.estimator == "deepseek":
        # Loading the vocabulary takes a while: off the event loop.
        tokenizer = await asyncio.to_thread(load_deepseek_tokenizer)
        estimator = Estimator(DeepSeekCounter(tokenizer))
    compactor = Compactor(ctx, config, estimator)
    # Registered plainly (not prepended): time-context prepends its listener, so the reading is
    # appended before compaction measures the history (see dsh.agent.hooks).
    ctx.on(PRE_STEP, compactor.on_pre_step_hook)
    ctx.provide(COMPACT, compactor)
