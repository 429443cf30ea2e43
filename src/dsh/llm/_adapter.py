"""The skeleton both HTTP adapters share (``openai-llm``, ``anthropic-llm``).

Owns :class:`SdkAdapter`: an adapter over a provider SDK's streaming call, with the key check
(``NO_API_KEY``), the idle timeout (``timeoutSeconds``, default 120 s: to the response's start,
then between two stream items), key scrubbing, and the pump that opens the SDK stream, feeds
each item to the adapter's translator, maps any failure through its error mapper and always
closes the stream; it runs through :func:`~dsh.llm.pump.pumped`, so an aborted signal cancels
it. A failure is raised outside the ``except`` block, so it carries no ``__context__``: the SDK's
own exception may quote the API key. A subclass supplies the SDK call (``_open``), the
translator (``_translator``) and, if it has one, a completeness check (``_check``).

Also the plugin helpers both plugins' ``apply`` use: :func:`plugin_config` (the config as the
plugin's ``Config``) and :func:`mount` (serve the models; close and unregister with the
plugin). Imports no SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import msgspec

from dsh.llm._config_common import DEFAULT_TIMEOUT_SECONDS, REDACTED
from dsh.llm._errors_common import BaseErrorMapper, IdleTimeout
from dsh.llm.pump import pumped
from dsh.llm.service import LLM
from dsh.llm.types import LlmError, LlmRequest, StreamChunk

if TYPE_CHECKING:
    from dsh.runtime import Context

__all__ = ["SdkAdapter", "Translating", "mount", "plugin_config"]


class Translating(Protocol):
    """A provider's stream items → dsh chunks (each adapter's ``Translator``)."""

    def feed(self, item: Any, /) -> None: ...
    def end(self) -> None: ...


T = TypeVar("T", bound=Translating)
C = TypeVar("C", bound=msgspec.Struct)


class SdkAdapter(Generic[T]):
    """What an SDK-backed adapter does around its SDK call; see the module docstring."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        max_retries: int,
        timeout_seconds: float | None,
        errors: type[BaseErrorMapper],
    ) -> None:
        if not api_key:
            raise LlmError("an API key is required", code="NO_API_KEY")
        self._api_key = api_key
        self.base_url = base_url
        self.max_retries = max_retries
        self.timeout = timeout_seconds if timeout_seconds is not None else DEFAULT_TIMEOUT_SECONDS
        self._error = errors(base_url, self.timeout, max_retries, self.scrub)

    def scrub(self, text: str) -> str:
        """``text`` with every occurrence of the API key replaced."""
        key = self._api_key
        return text.replace(key, REDACTED) if key and key in text else text

    # ------------------------------------------------------------------ what a subclass adds

    def _translator(self, emit: Callable[[StreamChunk], None]) -> T:
        raise NotImplementedError

    async def _open(self, request: LlmRequest) -> Any:
        """The SDK's stream for ``request``; Any because its type needs the SDK's generics (and
        it is read only through aiter/anext/close)."""
        raise NotImplementedError

    def _check(self, translator: T) -> None:
        """Called when the stream ends without error, before it is closed; may raise."""

    # ------------------------------------------------------------------ the pump

    async def _pump(self, request: LlmRequest, emit: Callable[[StreamChunk], None]) -> None:
        """Open the SDK stream and translate it; runs as its own task so it can be cancelled."""
        translator = self._translator(emit)
        stream: Any = None
        failure: LlmError | None = None
        try:
            stream = await self._open(request)
            items = aiter(stream)
            while True:
                # The idle timer also catches a server that keeps the connection busy (SSE
                # comments, say) without sending an item, which the socket read timeout misses.
                try:
                    async with asyncio.timeout(self.timeout):
                        item = await anext(items)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    raise IdleTimeout from None
                translator.feed(item)
            self._check(translator)
        except Exception as err:  # cancellation (a BaseException) propagates untouched
            failure = self._error(err, started=stream is not None)
        finally:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.close()
        if failure is not None:
            # Raised outside the handler so that it carries no __context__: the SDK's own
            # exception may quote the API key.
            raise failure
        translator.end()

    # ------------------------------------------------------------------ the adapter protocol

    def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        """Stream ``request``; ends with finish ``{kind:'aborted'}`` when its signal aborts."""
        return pumped(lambda emit: self._pump(request, emit), request.signal)


# --------------------------------------------------------------------------- plugin helpers


class _Closable(Protocol):
    def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]: ...
    async def aclose(self) -> None: ...


def plugin_config(config: object, cls: type[C]) -> C:
    """``config`` as the plugin's ``cls`` (a ``cls`` instance as is; ``None``: the defaults)."""
    if isinstance(config, cls):
        return config
    return msgspec.convert(config or {}, cls)


def mount(ctx: Context, models: Sequence[str], adapter: _Closable) -> None:
    """Serve ``models`` with ``adapter``; unregistered and closed with the plugin."""
    ctx.defer(adapter.aclose)
    ctx.defer(ctx.require(LLM).register_adapter(models, adapter))
