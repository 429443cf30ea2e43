"""DeepSeek and any OpenAI-compatible chat-completions endpoint, as the ``openai-llm`` plugin.

This module owns :class:`OpenAICompatAdapter` and its plugin. Transport is the official
``openai`` SDK's ``AsyncOpenAI`` (its HTTP client, SSE decoding, retries, timeouts and error
types); this module only maps dsh requests to the wire and wire chunks back to dsh chunks
(docs/llm.md):

- request: ``system`` first; a user message's text blocks concatenated with no separator; each
  ``tool-result`` as its own ``{role:'tool', tool_call_id, content}`` (``(no output)`` when empty);
  assistant tool calls as ``tool_calls`` with ``reasoning_content`` only on tool-call turns; tools
  as functions; ``stream_options: {include_usage: true}``; ``thinking``/``reasoning_effort``/
  ``extraBody`` through the SDK's ``extra_body``;
- stream: ``reasoning_content`` → a reasoning block (an empty string opens none), ``content`` → a
  text block, each wire tool-call index → its own tool-call block, dsh block indexes in first-seen
  order; deltas as they arrive, ``block-end``s, ``usage`` and ``finish`` deferred to the end;
- errors: :class:`~dsh.llm.types.LlmError` with codes ``AUTH``, ``RATE_LIMIT``,
  ``INVALID_REQUEST``, ``SERVER``, ``HTTP_<s>``, ``TIMEOUT``, ``CONNECTION``, ``STREAM_CLOSED``,
  ``MALFORMED_RESPONSE``, carrying the provider's message with the API key scrubbed out;
- cancellation: an aborted ``request.signal`` cancels the task that reads the HTTP stream, which
  closes the stream, and the iterator ends with finish ``{kind:'aborted'}``.

Retries (``maxRetries``, default 2) are the SDK's and only happen before the response starts;
nothing is retried once output has begun. ``timeoutSeconds`` (default 120) bounds each attempt's
wait for the response to start and every wait for the next chunk (an idle timeout, not a limit
on the whole reply); when it runs out the request fails with code ``TIMEOUT``. Error messages
start with the endpoint URL and name the cause (``<baseURL>: rate limited after 3 attempts (HTTP
429: <provider message>)``), so the line a person sees says where and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
import openai

from dsh.llm.service import LLM
from dsh.llm.types import (
    BlockEndChunk,
    ContentBlock,
    FinishReason,
    LlmError,
    LlmRequest,
    StreamChunk,
    TokenUsage,
)
from dsh.runtime.abort import run_cancellable

if TYPE_CHECKING:
    from dsh.runtime import Context

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MODELS",
    "Config",
    "OpenAICompatAdapter",
    "apply",
    "build_messages",
    "build_tools",
    "create_adapter",
    "inject",
    "map_finish_reason",
    "map_usage",
    "name",
    "resolve_api_key",
    "resolve_base_url",
]

name = "openai-llm"
inject = ["llm"]

DEFAULT_BASE_URL = "https://api.deepseek.com"
DEFAULT_MODELS = ("deepseek-v4-flash", "deepseek-v4-pro")
KEY_ENV = "DEEPSEEK_API_KEY"
BASE_URL_ENV = "DEEPSEEK_BASE_URL"
NO_OUTPUT = "(no output)"
# The longest wait for the response to start (per attempt) and between two chunks of it.
DEFAULT_TIMEOUT_SECONDS = 120.0
_REDACTED = "[redacted]"


def _user_agent() -> str:
    try:
        return f"dsh/{_dist_version('dsh')}"
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "dsh"


class Config(
    msgspec.Struct,
    omit_defaults=True,
    rename={
        "api_key": "apiKey",
        "api_key_env": "apiKeyEnv",
        "base_url": "baseURL",
        "reasoning_effort": "reasoningEffort",
        "max_retries": "maxRetries",
        "timeout_seconds": "timeoutSeconds",
        "extra_body": "extraBody",
    },
):
    """Plugin config (YAML keys in camelCase; ``baseURL`` as spelled by the reference)."""

    api_key: str | None = None
    api_key_env: str | None = None
    base_url: str | None = None
    models: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_MODELS))
    thinking: Literal["enabled", "disabled"] | None = None
    reasoning_effort: str | None = None
    max_retries: Annotated[int, msgspec.Meta(ge=0)] = 2
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0)] | None = None
    extra_body: dict[str, Any] | None = None

    def __repr__(self) -> str:  # the key must not reach logs through a config dump
        fields = ", ".join(
            f"{f}={_REDACTED if f == 'api_key' and v else v!r}"
            for f in self.__struct_fields__
            for v in (getattr(self, f),)
        )
        return f"Config({fields})"


# --------------------------------------------------------------------------- request mapping


def _text_of(blocks: Any) -> str:
    """The text blocks of ``blocks`` joined with no separator."""
    if not blocks:
        return ""
    return "".join(
        b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)
    )


def _assistant_to_wire(content: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            text.append(block["text"])
        elif kind == "reasoning":
            reasoning.append(block["text"])
        elif kind == "tool-call":
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": block["arguments"]},
                }
            )
    # Text-less turns send "" rather than null: some endpoints reject a null-content assistant
    # message without tool calls (a reasoning-only turn), which would poison the session.
    wire: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        joined = "".join(reasoning)
        if joined:  # thinking-mode passback: required on tool-call turns, ignored elsewhere
            wire["reasoning_content"] = joined
        wire["tool_calls"] = calls
    return wire


def build_messages(
    system: str | None, messages: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Map dsh messages (plus the system prompt) to chat-completions wire messages."""
    wire: list[dict[str, Any]] = []
    if system is not None:
        wire.append({"role": "system", "content": system})
    for message in messages:
        role = message.get("role")
        content = message.get("content") or ()
        if role == "assistant":
            wire.append(_assistant_to_wire(content))
        elif role == "system":
            wire.append({"role": "system", "content": _text_of(content)})
        else:
            results = [b for b in content if b.get("type") == "tool-result"]
            text = _text_of(content)
            if text or not results:
                wire.append({"role": "user", "content": text})
            for result in results:
                wire.append(
                    {
                        "role": "tool",
                        "tool_call_id": result["toolCallId"],
                        "content": _text_of(result.get("content")) or NO_OUTPUT,
                    }
                )
    return wire


def build_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Map ``{name, description, parameters}`` tools to chat-completions function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool.get("description", ""),
                "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
            },
        }
        for tool in tools
    ]


# --------------------------------------------------------------------------- stream mapping


def map_finish_reason(reason: str) -> FinishReason:
    """Wire ``finish_reason`` → dsh finish reason (unknown values become ``error``)."""
    if reason == "stop":
        return {"kind": "stop"}
    if reason == "tool_calls":
        return {"kind": "tool-calls"}
    if reason == "length":
        return {"kind": "max-tokens"}
    return {"kind": "error", "message": f"model stopped: {reason}", "code": reason.upper()}


def _get(obj: Any, key: str) -> Any:
    """A field of an SDK model (declared or extra) or of a plain mapping; ``None`` if absent."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def map_usage(usage: Any) -> TokenUsage:
    """Wire usage → disjoint dsh usage (``inputTokens`` excludes cache hits)."""
    prompt = _int(_get(usage, "prompt_tokens")) or 0
    completion = _int(_get(usage, "completion_tokens")) or 0
    cached = _int(_get(_get(usage, "prompt_tokens_details"), "cached_tokens"))
    if cached is None:
        cached = _int(_get(usage, "prompt_cache_hit_tokens"))
    reasoning = _int(_get(_get(usage, "completion_tokens_details"), "reasoning_tokens"))
    mapped: TokenUsage = {"inputTokens": prompt - (cached or 0), "outputTokens": completion}
    if cached is not None:
        mapped["cacheReadTokens"] = cached
    if reasoning is not None:
        mapped["reasoningTokens"] = reasoning
    return mapped


class _Open:
    """One dsh block under construction."""

    __slots__ = ("call_id", "index", "kind", "name", "parts")

    def __init__(self, index: int, kind: Literal["text", "reasoning", "tool-call"]) -> None:
        self.index = index
        self.kind = kind
        self.parts: list[str] = []
        self.call_id: str | None = None
        self.name: str | None = None

    def close(self) -> BlockEndChunk:
        text = "".join(self.parts)
        block: ContentBlock
        if self.kind == "text":
            block = {"type": "text", "text": text}
        elif self.kind == "reasoning":
            block = {"type": "reasoning", "text": text}
        else:
            block = {
                "type": "tool-call",
                "id": self.call_id or f"call-{self.index}",
                "name": self.name or "",
                "arguments": text,
            }
        return {"type": "block-end", "index": self.index, "block": block}


class _Translator:
    """Wire chunks → dsh chunks, emitted through ``emit`` as they are produced."""

    __slots__ = ("blocks", "emit", "finish", "reasoning", "text", "tools", "usage")

    def __init__(self, emit: Callable[[StreamChunk], None]) -> None:
        self.emit = emit
        self.blocks: list[_Open] = []
        self.text: _Open | None = None
        self.reasoning: _Open | None = None
        self.tools: dict[int, _Open] = {}
        self.finish: FinishReason | None = None
        self.usage: TokenUsage | None = None

    def _open(self, kind: Literal["text", "reasoning", "tool-call"]) -> _Open:
        block = _Open(len(self.blocks), kind)
        self.blocks.append(block)
        self.emit({"type": "block-start", "index": block.index, "blockType": kind})
        return block

    def feed(self, chunk: Any) -> None:
        emit = self.emit
        choices = _get(chunk, "choices") or ()
        if not isinstance(choices, list | tuple):
            raise LlmError("malformed chunk: choices is not a list", code="MALFORMED_RESPONSE")
        for choice in choices:
            delta = _get(choice, "delta")
            if delta is not None:
                reasoning = _get(delta, "reasoning_content")
                if isinstance(reasoning, str) and reasoning:
                    block = self.reasoning
                    if block is None:
                        block = self.reasoning = self._open("reasoning")
                    block.parts.append(reasoning)
                    emit({"type": "reasoning-delta", "index": block.index, "text": reasoning})
                content = _get(delta, "content")
                if isinstance(content, str) and content:
                    block = self.text
                    if block is None:
                        block = self.text = self._open("text")
                    block.parts.append(content)
                    emit({"type": "text-delta", "index": block.index, "text": content})
                calls = _get(delta, "tool_calls")
                if calls:
                    for position, call in enumerate(calls):
                        self._tool_delta(position, call)
            reason = _get(choice, "finish_reason")
            if isinstance(reason, str) and reason:
                self.finish = map_finish_reason(reason)
        usage = _get(chunk, "usage")
        if usage is not None:
            self.usage = map_usage(usage)

    def _tool_delta(self, position: int, call: Any) -> None:
        wire_index = _int(_get(call, "index"))
        if wire_index is None:
            wire_index = position
        block = self.tools.get(wire_index)
        if block is None:
            block = self.tools[wire_index] = self._open("tool-call")
        call_id = _get(call, "id")
        if isinstance(call_id, str) and call_id:
            block.call_id = call_id
        function = _get(call, "function")
        name = _get(function, "name")
        if isinstance(name, str) and name:
            block.name = name
        fragment = _get(function, "arguments")
        if not isinstance(fragment, str):
            fragment = ""
        if fragment:
            block.parts.append(fragment)
        if block.name is not None:
            self.emit(
                {
                    "type": "tool-call-delta",
                    "index": block.index,
                    "id": block.call_id or "",
                    "name": block.name,
                    "argumentsDelta": fragment,
                }
            )
        else:
            self.emit(
                {
                    "type": "tool-call-delta",
                    "index": block.index,
                    "id": block.call_id or "",
                    "argumentsDelta": fragment,
                }
            )

    def end(self) -> None:
        """The wire stream ended cleanly: emit the deferred block-ends, usage and finish."""
        if self.finish is None:
            raise LlmError(
                "the model stream ended before a finish reason was received",
                code="STREAM_CLOSED",
            )
        for block in self.blocks:
            self.emit(block.close())
        if self.usage is not None:
            self.emit({"type": "usage", "usage": self.usage})
        self.emit({"type": "finish", "reason": self.finish})


# --------------------------------------------------------------------------- errors


def _status_code(status: int) -> str:
    if status in (401, 403):
        return "AUTH"
    if status == 429:
        return "RATE_LIMIT"
    if status == 400:
        return "INVALID_REQUEST"
    if status >= 500:
        return "SERVER"
    return f"HTTP_{status}"


def _provider_message(body: object) -> str | None:
    """``error.message`` of an error body (the SDK hands over the ``error`` object itself)."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping):
            body = inner
        message = body.get("message") if isinstance(body, Mapping) else None
        if isinstance(message, str) and message:
            return message
    elif isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return None


_STATUS_CAUSES = {
    "AUTH": "authentication failed",
    "RATE_LIMIT": "rate limited",
    "INVALID_REQUEST": "request rejected",
    "SERVER": "server error",
    "HTTP_404": "not found (is the model name or the base URL wrong?)",
}


class _IdleTimeout(Exception):
    """No chunk arrived within the timeout (raised inside the pump, mapped by ``_error``)."""


def _seconds(value: float) -> str:
    return f"{value:g} s"


# --------------------------------------------------------------------------- adapter

_CHUNK = 0
_END = 1


class OpenAICompatAdapter:
    """Streams chat completions from an OpenAI-compatible endpoint through ``AsyncOpenAI``."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        max_retries: int = 2,
        timeout_seconds: float | None = None,
        thinking: Literal["enabled", "disabled"] | None = None,
        reasoning_effort: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        if not api_key:
            raise LlmError("an API key is required", code="NO_API_KEY")
        self._api_key = api_key
        self.base_url = base_url
        self.max_retries = max_retries
        self.timeout = timeout_seconds if timeout_seconds is not None else DEFAULT_TIMEOUT_SECONDS
        self._extra_body: dict[str, Any] = {}
        if thinking is not None:
            self._extra_body["thinking"] = {"type": thinking}
        if reasoning_effort is not None:
            self._extra_body["reasoning_effort"] = reasoning_effort
        if extra_body:
            self._extra_body.update(extra_body)
        if client is None:
            client = openai.AsyncOpenAI(
                api_key=api_key,
                base_url=base_url,
                max_retries=max_retries,
                timeout=self.timeout,
                default_headers={"User-Agent": _user_agent()},
            )
        self.client = client

    def __repr__(self) -> str:  # never show the key
        return f"OpenAICompatAdapter(base_url={self.base_url!r})"

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self.client.close()

    # ------------------------------------------------------------------ helpers

    def scrub(self, text: str) -> str:
        """``text`` with every occurrence of the API key replaced."""
        key = self._api_key
        return text.replace(key, _REDACTED) if key and key in text else text

    def _error(self, err: BaseException, started: bool) -> LlmError:
        """Map any failure to an :class:`LlmError` whose text names the endpoint and the cause
        (``<baseURL>: rate limited after 3 attempts (HTTP 429: <provider message>)``) and never
        contains the key."""
        # The SDK retries these (before any output) until maxRetries is used up.
        tries = self.max_retries + 1
        after = f" after {tries} attempts" if tries > 1 else ""
        if isinstance(err, LlmError):
            mapped = err
        elif isinstance(err, openai.APIStatusError):
            status = err.status_code
            detail = _provider_message(err.body)
            wire = f"HTTP {status}: {detail}" if detail else f"HTTP {status}"
            code = _status_code(status)
            retried = status in (408, 409, 429) or status >= 500
            cause = _STATUS_CAUSES.get(code, "the request failed")
            mapped = LlmError(f"{cause}{after if retried else ''} ({wire})", code=code, status=status)
        elif isinstance(err, _IdleTimeout):
            mapped = LlmError(
                f"the model sent nothing for {_seconds(self.timeout)} (idle timeout)", code="TIMEOUT"
            )
        elif isinstance(err, openai.APITimeoutError):
            if started:
                mapped = LlmError(
                    f"the model sent nothing for {_seconds(self.timeout)} (idle timeout)", code="TIMEOUT"
                )
            else:
                mapped = LlmError(
                    f"no response within {_seconds(self.timeout)}{after} (timeout)", code="TIMEOUT"
                )
        elif isinstance(err, openai.APIConnectionError):
            origin = err.__cause__
            detail = f" ({origin})" if origin is not None and str(origin) else ""
            if started:
                mapped = LlmError(
                    f"the model stream was cut off before it finished{detail}", code="STREAM_CLOSED"
                )
            else:
                mapped = LlmError(f"could not connect{after}{detail}", "CONNECTION")
        elif isinstance(err, json.JSONDecodeError):
            mapped = LlmError(f"malformed SSE payload: {err.doc[:120]}", code="MALFORMED_RESPONSE")
        elif isinstance(err, openai.APIError):  # an error event inside the stream
            message = _provider_message(err.body) or err.message
            mapped = LlmError(f"the model reported an error: {message}", code="SERVER")
        elif isinstance(err, ValueError | TypeError | AttributeError | KeyError):
            mapped = LlmError(f"malformed response: {err}", code="MALFORMED_RESPONSE")
        else:
            mapped = LlmError(f"{type(err).__name__}: {err}", code="UNKNOWN")
        text = self.scrub(f"{self.base_url}: {mapped.message}")
        return LlmError(text, code=mapped.code, status=mapped.status)

    def request_kwargs(self, request: LlmRequest) -> dict[str, Any]:
        """The SDK ``chat.completions.create`` keyword arguments for ``request``."""
        kwargs: dict[str, Any] = {
            "model": request.model,
            "messages": build_messages(request.system, request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            kwargs["tools"] = build_tools(request.tools)
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        if request.stop is not None:
            kwargs["stop"] = list(request.stop)
        if self._extra_body:
            kwargs["extra_body"] = dict(self._extra_body)
        return kwargs

    async def _pump(self, request: LlmRequest, emit: Callable[[StreamChunk], None]) -> None:
        """Open the SDK stream and translate it; runs as its own task so it can be cancelled."""
        translator = _Translator(emit)
        stream: Any = None
        failure: LlmError | None = None
        idle = self.timeout
        try:
            stream = await self.client.chat.completions.create(**self.request_kwargs(request))
            chunks = aiter(stream)
            while True:
                # The idle timer also catches a server that keeps the connection busy (SSE
                # comments, say) without sending a chunk, which the socket read timeout misses.
                try:
                    async with asyncio.timeout(idle):
                        chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    raise _IdleTimeout from None
                translator.feed(chunk)
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

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        """Stream ``request``; ends with finish ``{kind:'aborted'}`` when its signal aborts."""
        signal = request.signal
        if signal is not None and signal.aborted:
            yield {"type": "finish", "reason": {"kind": "aborted"}}
            return
        queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        put = queue.put_nowait

        def emit(chunk: StreamChunk) -> None:
            put((_CHUNK, chunk))

        # Abort → cancel the pump at once: its ``finally`` closes the HTTP stream.
        work = self._pump(request, emit)
        pump = asyncio.ensure_future(work if signal is None else run_cancellable(work, signal, _PumpAborted))
        pump.add_done_callback(lambda task: put((_END, task)))
        try:
            while True:
                kind, item = await queue.get()
                if signal is not None and signal.aborted:
                    yield {"type": "finish", "reason": {"kind": "aborted"}}
                    return
                if kind == _CHUNK:
                    yield item
                    continue
                if item.cancelled():
                    # not by the signal (checked above): the pump was cancelled from outside
                    raise LlmError("the model stream was cancelled", code="ABORTED")
                exc = item.exception()
                if exc is not None:
                    raise exc
                return
        finally:
            if not pump.done():
                pump.cancel()
                await asyncio.wait({pump})
            elif not pump.cancelled():
                pump.exception()  # retrieved: it was raised above or superseded by the abort


class _PumpAborted(Exception):
    """The pump was cancelled by the request's signal (the stream then ends ``aborted``)."""


# --------------------------------------------------------------------------- plugin


def resolve_api_key(cfg: Config) -> str:
    """``apiKey``, else ``$<apiKeyEnv>`` (when set), else ``$DEEPSEEK_API_KEY``."""
    if cfg.api_key:
        return cfg.api_key
    env = cfg.api_key_env or KEY_ENV
    key = os.environ.get(env, "")
    if not key:
        raise LlmError(
            f"openai-llm: an API key is required (config apiKey or ${env})", code="NO_API_KEY"
        )
    return key


def resolve_base_url(cfg: Config) -> str:
    """``baseURL``, else ``$DEEPSEEK_BASE_URL``, else ``https://api.deepseek.com``."""
    return cfg.base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL


def _config(config: object) -> Config:
    if isinstance(config, Config):
        return config
    return msgspec.convert(config or {}, Config)


def create_adapter(config: Config | Mapping[str, Any] | None = None) -> OpenAICompatAdapter:
    """Build the adapter from plugin config (and the environment fallbacks)."""
    cfg = _config(config)
    return OpenAICompatAdapter(
        api_key=resolve_api_key(cfg),
        base_url=resolve_base_url(cfg),
        max_retries=cfg.max_retries,
        timeout_seconds=cfg.timeout_seconds,
        thinking=cfg.thinking,
        reasoning_effort=cfg.reasoning_effort,
        extra_body=cfg.extra_body,
    )


def apply(ctx: Context, config: Config | Mapping[str, Any] | None = None) -> None:
    """Register the adapter for ``config.models``; unregistered and closed with the plugin."""
    cfg = _config(config)
    adapter = create_adapter(cfg)
    ctx.defer(adapter.aclose)
    ctx.defer(ctx.require(LLM).register_adapter(cfg.models, adapter))
