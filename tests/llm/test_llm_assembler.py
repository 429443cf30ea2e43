"""The chunk assembler: ordering, block-end precedence, defaults, and property-based round trips."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.llm.assembler import ChunkAssembler
from dsh.llm.types import LlmError


def assemble(chunks: list[dict[str, Any]]) -> ChunkAssembler:
    a = ChunkAssembler()
    for c in chunks:
        a.push(c)
    return a


def test_text_reasoning_and_tool_call_from_deltas() -> None:
    a = assemble(
        [
            {"type": "block-start", "index": 0, "blockType": "reasoning"},
            {"type": "reasoning-delta", "index": 0, "text": "hm"},
            {"type": "reasoning-delta", "index": 0, "text": "m"},
            {"type": "block-start", "index": 1, "blockType": "text"},
            {"type": "text-delta", "index": 1, "text": "Hi"},
            {"type": "tool-call-delta", "index": 2, "id": "c1", "name": "f", "argumentsDelta": "{"},
            {"type": "tool-call-delta", "index": 2, "id": "c1", "argumentsDelta": "}"},
            {"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 2}},
            {"type": "finish", "reason": {"kind": "tool-calls"}},
        ]
    )
    assert a.blocks() == [
        {"type": "reasoning", "text": "hmm"},
        {"type": "text", "text": "Hi"},
        {"type": "tool-call", "id": "c1", "name": "f", "arguments": "{}"},
    ]
    assert a.tool_calls() == [a.blocks()[2]]
    assert a.usage == {"inputTokens": 1, "outputTokens": 2}
    assert a.finish == {"kind": "tool-calls"}
    assert a.finished
    assert a.message() == {"role": "assistant", "content": a.blocks()}


def test_first_seen_index_order_not_numeric_order() -> None:
    a = assemble(
        [
            {"type": "text-delta", "index": 5, "text": "five"},
            {"type": "block-start", "index": 1, "blockType": "text"},
            {"type": "text-delta", "index": 1, "text": "one"},
            {"type": "text-delta", "index": 5, "text": "!"},
        ]
    )
    assert a.blocks() == [{"type": "text", "text": "five!"}, {"type": "text", "text": "one"}]


def test_first_block_end_wins_and_later_deltas_are_ignored() -> None:
    a = assemble(
        [
            {"type": "block-start", "index": 0, "blockType": "text"},
            {"type": "text-delta", "index": 0, "text": "partial"},
            {"type": "block-end", "index": 0, "block": {"type": "text", "text": "authoritative"}},
            {"type": "text-delta", "index": 0, "text": "straggler"},
            {"type": "block-end", "index": 0, "block": {"type": "text", "text": "second close"}},
            {"type": "tool-call-delta", "index": 0, "id": "x", "argumentsDelta": "{}"},
        ]
    )
    assert a.blocks() == [{"type": "text", "text": "authoritative"}]


def test_block_end_for_an_unseen_index_creates_the_block() -> None:
    block = {"type": "tool-call", "id": "k", "name": "n", "arguments": "{}"}
    a = assemble([{"type": "block-end", "index": 3, "block": block}])
    assert a.blocks() == [block]


def test_tool_call_without_id_gets_call_index() -> None:
    a = assemble(
        [
            {"type": "block-start", "index": 4, "blockType": "tool-call"},
            {"type": "tool-call-delta", "index": 4, "id": "", "name": "t", "argumentsDelta": "{}"},
            {"type": "block-start", "index": 7, "blockType": "tool-call"},
        ]
    )
    assert a.blocks() == [
        {"type": "tool-call", "id": "call-4", "name": "t", "arguments": "{}"},
        {"type": "tool-call", "id": "call-7", "name": "", "arguments": ""},
    ]


def test_defaults_without_usage_or_finish() -> None:
    a = ChunkAssembler()
    assert a.blocks() == []
    assert a.usage is None
    assert a.finish == {"kind": "stop"}
    assert not a.finished
    a.push({"type": "some-future-chunk", "index": 0})  # ignored
    assert a.blocks() == []


def test_latest_usage_and_error_finish() -> None:
    a = assemble(
        [
            {"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 1}},
            {"type": "usage", "usage": {"inputTokens": 2, "outputTokens": 3, "cacheReadTokens": 4}},
            {"type": "finish", "reason": {"kind": "error", "message": "boom", "code": "X"}},
        ]
    )
    assert a.usage == {"inputTokens": 2, "outputTokens": 3, "cacheReadTokens": 4}
    assert a.finish == {"kind": "error", "message": "boom", "code": "X"}


def test_unknown_open_block_type_cannot_be_assembled() -> None:
    a = assemble([{"type": "block-start", "index": 0, "blockType": "image"}])
    with pytest.raises(LlmError, match='incomplete block of type "image"'):
        a.blocks()


def test_interrupted_blocks_keep_only_non_blank_text() -> None:
    a = assemble(
        [
            {"type": "reasoning-delta", "index": 0, "text": "thinking"},
            {"type": "text-delta", "index": 1, "text": "  "},
            {"type": "tool-call-delta", "index": 2, "id": "c", "name": "f", "argumentsDelta": "{"},
            {"type": "text-delta", "index": 3, "text": "half an ans"},
        ]
    )
    assert a.interrupted_blocks() == [
        {"type": "reasoning", "text": "thinking"},
        {"type": "text", "text": "half an ans"},
    ]


@pytest.mark.perf
def test_fast_enough_for_per_chunk_use() -> None:
    chunks = [{"type": "text-delta", "index": i % 3, "text": "x"} for i in range(100_000)]
    start = time.perf_counter()
    a = assemble(chunks)
    blocks = a.blocks()
    elapsed = time.perf_counter() - start
    assert [len(b["text"]) for b in blocks] == [33_334, 33_333, 33_333]  # type: ignore[typeddict-item]
    assert elapsed < 1.0  # ~tens of ms in practice


# --------------------------------------------------------------------------- properties

block_strategy = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=30)),
    st.builds(lambda t: {"type": "reasoning", "text": t}, st.text(max_size=30)),
    st.builds(
        lambda i, n, a: {"type": "tool-call", "id": i, "name": n, "arguments": a},
        st.text(min_size=1, max_size=8),
        st.text(min_size=1, max_size=8),
        st.text(max_size=30),
    ),
)


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points)] or [""]


def deltas_for(index: int, block: dict[str, Any], cuts: list[int]) -> list[dict[str, Any]]:
    if block["type"] == "tool-call":
        parts = split(block["arguments"], cuts)
        return [
            {
                "type": "tool-call-delta",
                "index": index,
                "id": block["id"],
                **({"name": block["name"]} if i == 0 else {}),
                "argumentsDelta": part,
            }
            for i, part in enumerate(parts)
        ]
    kind = "text-delta" if block["type"] == "text" else "reasoning-delta"
    return [{"type": kind, "index": index, "text": p} for p in split(block["text"], cuts)]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    blocks=st.lists(block_strategy, max_size=5),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=6),
    with_end=st.booleans(),
    data=st.data(),
)
def test_interleaved_deltas_round_trip(
    blocks: list[dict[str, Any]], cuts: list[int], with_end: bool, data: st.DataObject
) -> None:
    # Each block streamed as deltas; the streams are interleaved arbitrarily, keeping per-block
    # order and the first chunk of block i before the first chunk of block i+1.
    queues = [
        [{"type": "block-start", "index": i, "blockType": b["type"]}, *deltas_for(i, b, cuts)]
        for i, b in enumerate(blocks)
    ]
    if with_end:
        for i, b in enumerate(blocks):
            queues[i].append({"type": "block-end", "index": i, "block": b})
    stream: list[dict[str, Any]] = []
    started = 0
    while any(queues):
        candidates = [i for i in range(min(started + 1, len(queues))) if queues[i]]
        pick = data.draw(st.sampled_from(candidates))
        if pick == started:
            started += 1
        stream.append(queues[pick].pop(0))
    assert assemble(stream).blocks() == blocks


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(block_strategy, min_size=1, max_size=4), st.lists(st.text(max_size=5), max_size=4))
def test_block_end_beats_any_trailing_deltas(
    blocks: list[dict[str, Any]], noise: list[str]
) -> None:
    stream: list[dict[str, Any]] = [
        {"type": "block-end", "index": i, "block": b} for i, b in enumerate(blocks)
    ]
    for i in range(len(blocks)):
        for n in noise:
            stream.append({"type": "text-delta", "index": i, "text": n})
            stream.append({"type": "tool-call-delta", "index": i, "id": n, "argumentsDelta": n})
    assert assemble(stream).blocks() == blocks
    # chunks are plain JSON: logging them verbatim round-trips
    assert json.loads(json.dumps(stream)) == stream
