"""The physical plausibility of raw timings (``recompute.plausibility`` and ``check_cells``), one rule at a
time on hand-made ``requests.jsonl`` rows: each broken rule is one reason naming the line (or the cell and
repeat) and the value; a real row of the tiny-cpu demo on llama.cpp, 31 of its 32 chunks read at one
instant, passes."""

from __future__ import annotations

from typing import Any

import pytest

from lair.registry.service.recompute import MAX_STREAM_TOK_S, check_cells, plausibility

# one request of a real tiny-cpu bench (llama.cpp, ctx 256, 32 tokens): chunk token shares of the
# completion by text length, every chunk after the first in one read
REAL = {
    "context": 256, "concurrency": 1, "repeat": 0, "index": 0, "send_ms": 0.0, "ttft_ms": 12.508,
    "prompt_tokens": 257, "completion_tokens": 32, "cached_tokens": 0, "status": 200, "error": "",
    "chunk_ms": [12.508] + [14.574] * 31,
    "chunk_tokens": [0.542] * 4 + [1.085, 0.542] + [1.085] * 26,
}  # fmt: skip


def _with(**kw: Any) -> list[dict[str, Any]]:
    return [REAL | kw]


def test_a_real_burst_of_chunks_is_plausible() -> None:
    assert abs(sum(REAL["chunk_tokens"]) - 32) < 0.01  # type: ignore[arg-type]
    assert plausibility([REAL]) == []


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"send_ms": -1e15}, "requests.jsonl line 1: send_ms -1000000000000000.0 is before the repeat's"),
        ({"chunk_ms": [-5.0, 1.0]}, "requests.jsonl line 1: chunk_ms[0] -5.0 is before the request was sent"),
        ({"chunk_ms": [0.0] + [14.574] * 31}, "requests.jsonl line 1: the first chunk arrives 0 ms after"),
        ({"chunk_tokens": [-3.0] + [1.0] * 31}, "requests.jsonl line 1: chunk_tokens[0] -3.0 is not a"),
        ({"completion_tokens": None}, "requests.jsonl line 1: no completion_tokens: the server's own usage"),
        ({"prompt_tokens": None}, "requests.jsonl line 1: no prompt_tokens: the server's own usage"),
        ({"completion_tokens": 16}, "requests.jsonl line 1: 32 content chunks for 16 completion tokens"),
        ({"prompt_tokens": 100}, "requests.jsonl line 1: prompt_tokens 100 is not the cell's context 256"),
        ({"prompt_tokens": 4096}, "requests.jsonl line 1: prompt_tokens 4096 is not the cell's context 256"),
        # 31 tokens in 1 us after the first chunk: 31,000,000 tok/s
        (
            {"chunk_ms": [12.508] + [12.509] * 31, "chunk_tokens": [1.0] * 32},
            "requests.jsonl line 1: 31 tokens in 1.000 us after the first chunk is 31,000,000 tok/s",
        ),
    ],
)  # fmt: skip
def test_each_broken_rule_is_one_located_reason(change: dict[str, Any], needle: str) -> None:
    reasons = plausibility(_with(**change))
    assert len(reasons) == 1 and reasons[0].startswith(needle), reasons


def test_the_floors_edges() -> None:
    # a prompt 32 tokens off a small context is within the slack, 33 is not (10% of 256 is 25.6)
    assert plausibility(_with(prompt_tokens=256 + 32)) == []
    assert len(plausibility(_with(prompt_tokens=256 + 33))) == 1
    # 31 tokens in 31 us is exactly one token a microsecond: allowed; in 30 us: refused
    assert MAX_STREAM_TOK_S == 1e6
    ones = [1.0] * 32
    assert plausibility(_with(chunk_ms=[12.5] + [12.531] * 31, chunk_tokens=ones)) == []
    assert len(plausibility(_with(chunk_ms=[12.5] + [12.53] * 31, chunk_tokens=ones))) == 1
    # a failed request is not asked for usage (the failure itself refuses the cell)
    assert plausibility(_with(error="boom", completion_tokens=None, prompt_tokens=None)) == []


def test_a_repeat_whose_first_send_is_not_at_zero_is_refused() -> None:
    bench = {
        "options": {"decode_tokens": 32, "force_output": True},
        "cells": [{"context": 256, "concurrency": 1}],
    }
    _, reasons = check_cells(bench, _with(send_ms=5.0))
    assert "cell ctx 256 x1 repeat 0: its first send is at 5 ms, not 0" in " | ".join(reasons)
