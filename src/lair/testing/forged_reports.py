"""Run reports made up in a test, as a forger's script would write them: raw timings at a chosen
decode speed and the ``results.json`` cells computed from them by the bench's own definitions
(:mod:`lair.bench.definitions`, as :mod:`lair.bench.runner` applies them), so that every cell agrees
with the registry's recomputation. Only the physics can tell such a report from a real one."""

from __future__ import annotations

import json
from typing import Any

from lair.bench import definitions as d

__all__ = ["certificates", "made_up_report"]

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


WATTS = 300.0
"""The average power of the made-up GPU during every cell (its peak: 350 W)."""


def _gpu_window(samples: int, energy_j: float) -> dict[str, Any]:
    return {
        "samples": samples, "gpus": 1, "energy_j": energy_j, "energy_source": "counter", "avg_w": WATTS,
        "peak_w": 350.0, "sm_clock_mhz": {"min": 1980.0, "max": 1980.0},
        "mem_clock_mhz": {"min": 3201.0, "max": 3201.0}, "temp_c_max": 55.0, "mem_used_mib_max": 20000.0,
        "throttle_reasons": [], "thermal_throttled": False, "power_throttled": False,
    }  # fmt: skip


def _energy(out_tokens: int, prompt_tokens: int, seconds: float) -> dict[str, Any]:
    """What :func:`lair.bench.certificate.energy_figures` writes of :data:`WATTS` over ``seconds``."""
    energy_j = WATTS * seconds
    return {
        "energy_j": energy_j, "energy_source": "counter", "seconds": seconds, "output_tokens": out_tokens,
        "prompt_tokens": prompt_tokens, "j_per_output_token": energy_j / out_tokens,
        "j_per_prompt_token": energy_j / prompt_tokens,
        "output_tokens_per_kwh": out_tokens / (energy_j / 3.6e6),
        "avg_w": WATTS, "peak_w": 350.0, "output_tok_s": out_tokens / seconds, "usd_per_mtok": None,
    }  # fmt: skip


def certificates(
    cells: list[dict[str, Any]],
    gpus: dict[str, Any] | None,
    requests: int = 1,
    seconds: list[float] | None = None,
) -> dict[str, Any]:
    """Give each cell of ``cells`` a certificate as the bench writes it (cold cache proven by the
    responses, an idle client, and GPU samples with an energy figure when ``gpus`` names GPUs: 300 W
    over the cell's ``seconds``, its repeats' spans, default 2 s), and return the run's certificate
    (``bench.certificate``). ``requests``: requests per cell."""
    for i, cell in enumerate(cells):
        out = int(cell.get("completion_tokens") or 1) * requests
        prompt = int(cell.get("prompt_tokens") or 1) * requests
        span = seconds[i] if seconds else 2.0
        cell["certificate"] = {
            "position": i, "started_s": 3.0 * i, "duration_s": 2.0, "idle_gap_s": 0.0,
            "cache": {
                "metric": None, "hits_before": [None], "hits_after": [None], "counter_hit_tokens": None,
                "response_cached_tokens": cell.get("cached_tokens"), "proven_by": ["responses"], "cold": True,
            },
            "client": {
                "cpu_fraction_max": float(cell["client"].get("cpu_fraction_max", 0.0)),
                "loop_lag_p99_ms_max": float(cell["client"].get("loop_lag_p99_ms_max", 0.0)),
                "batched_lag_p99_ms_max": float(cell["client"].get("batched_lag_p99_ms_max", 0.0)),
                "read_interval_ms": 20.0, "bound": False,
                "limits": {"cpu_fraction": 0.8, "loop_lag_p99_ms": 5.0},
            },
            "gpu": _gpu_window(20, WATTS * span) if gpus else None,
            "energy": _energy(out, prompt, span) if gpus else None,
        }  # fmt: skip
    software: dict[str, Any] = {"engine": "llama.cpp", "engine_version": "b6500", "engine_commit": "abc1234"}
    if gpus:
        software |= {
            "driver": "580.159.04",
            "cuda": "13.0",
            "nvml": "13.580.159.04",
            "gpus": list(gpus["models"]),
        }
    return {
        "order": "shuffled", "seed": 7, "cells_in_order": [[c["context"], c["concurrency"]] for c in cells],
        "warmup_requests": 1, "idle_gap_s": 0.0, "telemetry": "nvml" if gpus else "none",
        "telemetry_note": "" if gpus else "no GPU telemetry: nvml: NVML Shared Library Not Found",
        "telemetry_interval_s": 0.1, "software": software, "pricing": {},
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
    certified: bool = True,
    repeat_speeds: tuple[float, ...] | None = None,
) -> dict[str, bytes]:
    """The files of a report folder whose every request streams ``decode_tokens`` one-token chunks
    ``1000 / decode_tok_s`` ms apart after a ``ttft_ms`` first token, on a rig whose fingerprint
    names ``gpus`` (nvidia-smi's ``{"count", "models", "memory"}``, None: a CPU-only rig); the recipe
    as run is ``recipe_toml`` itself. Each call's timings differ (``run_name`` salts the TTFT). With
    ``certified`` every cell has a clean certificate (:func:`certificates`). ``repeat_speeds``: a
    decode speed per repeat instead (their number is the repeats')."""
    speeds = repeat_speeds or (decode_tok_s,) * repeats
    gaps = [round(1000 / v, 3) for v in speeds]
    salt = (sum(run_name.encode()) % 997) / 1000  # another digest for another name
    rows, cells, spans = [], [], []
    for ctx in contexts:
        reps = [
            [_row(ctx, concurrency, r, i, ttft_ms + salt, gap, decode_tokens) for i in range(concurrency)]
            for r, gap in enumerate(gaps)
        ]
        rows += [row for rep in reps for row in rep]
        cells.append(_cell(ctx, concurrency, reps, decode_tokens))
        spans.append(sum(max(row["chunk_ms"][-1] for row in rep) / 1000 for rep in reps))
    fp = {"gpus": gpus, "cpu": {"model": cpu_model, "count": 16, "arch": "x86_64"}, "ram_bytes": 1 << 37}
    options = {"decode_tokens": decode_tokens, "force_output": True, "read_interval_ms": 20.0}
    bench: dict[str, Any] = {"schema_version": 1, "options": options, "cells": cells}
    if certified:
        bench["certificate"] = certificates(cells, gpus, requests=concurrency * len(gaps), seconds=spans)
    doc = {
        "schema_version": 1, "kind": "lair.run_report", "run_name": run_name,
        "recipe": {"file": "recipe.recipe.toml", "model_sha256": model_sha256},
        "bench": bench, "fingerprint": fp,
    }  # fmt: skip
    return {
        "results.json": json.dumps(doc).encode(),
        "requests.jsonl": "".join(json.dumps(r) + "\n" for r in rows).encode(),
        "fingerprint.json": json.dumps(fp).encode(),
        "recipe.recipe.toml": recipe_toml.encode(),
    }
