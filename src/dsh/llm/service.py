"""The ``llm`` service: the model-name → adapter registry and the one streaming entry point.

This module owns :class:`LlmService` and the plugin (``name = "llm"``) that provides it as
``LLM``:

- ``register_adapter(models, adapter) -> unregister``; a model already served raises
  ``LlmError(code="DUPLICATE_ADAPTER")`` and registers nothing;
- ``has_model(model)``, ``models()``;
- ``set_fallback(adapter) -> remove``: the adapter of every model no other serves (an endpoint
  that serves any name: ``anyModel`` of ``openai-llm``);
- ``stream(request)``: an async iterator of the adapter's chunks, routed by ``request.model``
  through the ``llm/stream`` waterfall (:data:`dsh.llm.hooks.STREAM`, ``listener(request, next)``; ``next()`` returns the chunk
  iterator of the rest of the chain, ending in the adapter). A model nobody serves raises
  ``LlmError('no adapter registered for model "<m>"', code="NO_ADAPTER")`` on first iteration.

Adapters are plain objects with ``stream(request) -> AsyncIterator[chunk]``; the service adds no
buffering and no per-chunk work beyond forwarding.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, cast

from dsh.llm.hooks import STREAM, StreamCall
from dsh.llm.types import Adapter, LlmError, LlmRequest, StreamChunk
from dsh.runtime.keys import ServiceKey

if TYPE_CHECKING:
    from dsh.runtime import Context

__all__ = ["LlmService", "apply", "name"]

name = "llm"


class LlmService:
    """Routes :class:`LlmRequest`s to the adapter registered for their model."""

    def __init__(self, ctx: Context | None = None) -> None:
        self._ctx = ctx
        self._adapters: dict[str, Adapter] = {}
        self._fallback: Adapter | None = None

    # ------------------------------------------------------------------ registry

    def register_adapter(self, models: Sequence[str], adapter: Adapter) -> Callable[[], None]:
        """Serve ``models`` with ``adapter``; returns a function that removes the registration.

        All-or-nothing: if any model is already served (or listed twice), raises
        ``LlmError(code="DUPLICATE_ADAPTER")`` and registers none of them.
        """
        names = [models] if isinstance(models, str) else list(models)
        if not callable(getattr(adapter, "stream", None)):
            raise TypeError("an LLM adapter must have a stream(request) method")
        seen: set[str] = set()
        for model in names:
            if not isinstance(model, str) or not model:
                raise TypeError(f"model names must be non-empty strings, got {model!r}")
            if model in self._adapters or model in seen:
                raise LlmError(
                    f'an adapter is already registered for model "{model}"',
                    code="DUPLICATE_ADAPTER",
                )
            seen.add(model)
        for model in names:
            self._adapters[model] = adapter

        def unregister() -> None:
            for model in names:
                if self._adapters.get(model) is adapter:
                    del self._adapters[model]

        return unregister

    def set_fallback(self, adapter: Adapter) -> Callable[[], None]:
        """Serve every model no registered adapter serves with ``adapter``."""
        self._fallback = adapter

        def remove() -> None:
            if self._fallback is adapter:
                self._fallback = None

        return remove

    def has_model(self, model: str) -> bool:
        """Whether some adapter serves ``model``."""
        return model in self._adapters or (self._fallback is not None and bool(model))

    def models(self) -> list[str]:
        """The served model names, in registration order."""
        return list(self._adapters)

    def adapter_for(self, model: str) -> Adapter:
        """The adapter serving ``model``; raises ``LlmError(code="NO_ADAPTER")``."""
        adapter = self._adapters.get(model) or (self._fallback if model else None)
        if adapter is None:
            raise LlmError(f'no adapter registered for model "{model}"', code="NO_ADAPTER")
        return adapter

    # ------------------------------------------------------------------ streaming

    def _open(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        return self.adapter_for(request.model).stream(request)

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        """Stream ``request`` through the ``llm/stream`` waterfall to its model's adapter."""
        if self._ctx is not None:
            opened: object = await self._ctx.waterfall(
                STREAM, StreamCall(request), default=lambda: self._open(request)
            )
            if inspect.isawaitable(opened):  # a listener returned a coroutine of an iterator
                opened = await opened
            iterator = cast(AsyncIterator[StreamChunk], opened)
        else:
            iterator = self._open(request)
        try:
            async for chunk in iterator:
                yield chunk
        finally:
            aclose: Callable[[], Awaitable[object]] | None = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()


LLM: ServiceKey[LlmService] = ServiceKey("llm")
"""The LLM service (``ctx.require(LLM)``)."""


def apply(ctx: Context, config: object = None) -> None:
    """Provide ``LLM``."""
    ctx.provide(LLM, LlmService(ctx))
