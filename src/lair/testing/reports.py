"""Run reports made up in a test, as a forger's script would write them: raw timings at a chosen
decode speed and the ``results.json`` cells computed from them by the bench's own definitions
(:mod:`lair.bench.definitions`, as :mod:`lair.bench.runner` applies them), so that every cell agrees
with the registry's recomputation. Only the physics can tell such a report from a real one."""

from __future__ import annotations

import json
from typing import Any

from lair.bench import definitions as d

__all__ = ["made_up_report"]

_CLIENT = {"cpu_fraction_max": 0.1, "loop_lag_p99_ms_max": 0.5, "batched_lag_p99_ms_max": 0.5}


def _row(ctx: int, conc: int, rep: int, i: int, ttft_ms: float, gap_ms: float, tokens: int) -> dict[str, Any]:
    chunks = [round(ttft_ms + k * gap_ms, 3) for k in range(tokens)]
    return {
        "context": ctx, "concurrency": conc, "repeat": rep, "index": i, "send_ms": 0.0,
        "ttft_ms": chunks[0], "decode_tok_s": None, "prompt_tokens": ctx, "completion_tokens": tokens,
        "cached_tokens": 0, "status": 200, "error": "", "chunk_ms": chunks, "chunk_tokens": [1.0] * tokens,
    }  # fmt: skip


def _timing(row: dict[str, Any]) -> d.RequestTiming:
    send = row["send_ms"] / 1000
    times = [send + c / 1000 for c in row["chunk_ms"]]
    return d.RequestTiming(
        send_t=send,
        content_times=times,
        content_cum_tokens=list(range(1, len(times) + 1)),
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        cached_tokens=row["cached_tokens"],
        status=200,
    )


def _p50(values: list[float | None]) -> float | None:
    sm = d.summarize(values)
    return sm.p50 if sm else None


def _cell(ctx: int, conc: int, reps: list[list[dict[str, Any]]], tokens: int) -> dict[str, Any]:
    timings = [[_timing(r) for r in rep] for rep in reps]
    ok = [t for rep in timings for t in rep]
    ttft = d.summarize([(x * 1000 if (x := d.ttft_s(t)) is not None else None) for t in ok])
    return {
        "context": ctx, "concurrency": conc, "repeats": len(reps), "prompt_tokens": ctx,
        "ttft_ms_p50": ttft.p50 if ttft else None, "ttft_ms_p90": ttft.p90 if ttft else None,
        "prefill_tok_s": _p50([d.prefill_tok_s(rep) for rep in timings]),
        "decode_tok_s_per_stream": _p50([d.per_stream_decode_tok_s(t) for t in ok]),
        "decode_tok_s_aggregate": _p50([d.aggregate_decode_tok_s(rep) for rep in timings]),
        "completion_tokens": tokens, "cached_tokens": 0, "cache_hit": False, "client_bound": False,
        "output_length_ok": True, "errors": 0, "flags": [], "client": dict(_CLIENT), "engine_metrics": [],
    }  # fmt: skip


def made_up_report(
    recipe_toml: str,
    model_sha256: str,
    *,
    decode_tok_s: float,
    gpus: dict[str, Any] | None,
    cpu_model: str = "AMD EPYC",
    contexts: tuple[int, ...] = (256,),
    concurrency: int = 1,
    decode_tokens: int = 32,
    repeats: int = 2,
    ttft_ms: float = 10.0,
    run_name: str = "made-up",
) -> dict[str, bytes]:
    """The files of a report folder whose every request streams ``decode_tokens`` one-token chunks
    ``1000 / decode_tok_s`` ms apart after a ``ttft_ms`` first token, on a rig whose fingerprint
    names ``gpus`` (nvidia-smi's ``{"count", "models", "memory"}``, None: a CPU-only rig); the recipe
    as run is ``recipe_toml`` itself. Each call's timings differ (``run_name`` salts the TTFT)."""
    gap = round(1000 / decode_tok_s, 3)
    salt = (sum(run_name.encode()) % 997) / 1000  # another digest for another name
    rows, cells = [], []
    for ctx in contexts:
        reps = [
            [_row(ctx, concurrency, r, i, ttft_ms + salt, gap, decode_tokens) for i in range(concurrency)]
            for r in range(repeats)
        ]
        rows += [row for rep in reps for row in rep]
        cells.append(_cell(ctx, concurrency, reps, decode_tokens))
    fp = {"gpus": gpus, "cpu": {"model": cpu_model, "count": 16, "arch": "x86_64"}, "ram_bytes": 1 << 37}
    options = {"decode_tokens": decode_tokens, "force_output": True, "read_interval_ms": 20.0}
    doc = {
        "schema_version": 1, "kind": "lair.run_report", "run_name": run_name,
        "recipe": {"file": "recipe.recipe.toml", "model_sha256": model_sha256},
        "bench": {"schema_version": 1, "options": options, "cells": cells}, "fingerprint": fp,
    }  # fmt: skip
    return {
        "results.json": json.dumps(doc).encode(),
        "requests.jsonl": "".join(json.dumps(r) + "\n" for r in rows).encode(),
        "fingerprint.json": json.dumps(fp).encode(),
        "recipe.recipe.toml": recipe_toml.encode(),
    }
