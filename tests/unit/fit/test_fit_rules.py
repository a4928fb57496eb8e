"""Verdict rules, speculative decoding, ratings of measured rows, and reading a recipe's layout."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from fit_configs import LLAMA_3_1_8B, LLAMA_3_1_70B

from lair.fit import (
    Hardware,
    Layout,
    Measured,
    decode_bound,
    facts_from_config,
    find_device,
    fit,
    layout_from_recipe,
    rate_row,
)
from lair.fit.catalog import GIB


def test_unified_memory_cannot_offload() -> None:
    f = facts_from_config(LLAMA_3_1_70B)
    r = fit(f, Hardware(find_device("DGX Spark")), Layout(), context=8192)
    # 141,107,412,992 B of weights > 0.9 x 128 GiB = 123,695,058,124 B: nothing to offload to
    assert r.verdict == "does-not-fit"
    assert "unified memory" in r.reasons[-1]


def test_too_few_gpus() -> None:
    r = fit(facts_from_config(LLAMA_3_1_8B), Hardware(find_device("L40S"), 1), Layout(tp=2))
    assert r.verdict == "does-not-fit"
    assert r.reasons == ["needs 2 GPUs (tp 2 x pp 1 x dp 1); the hardware has 1"]


def test_kv_not_fitting_is_not_an_offload_when_weights_cannot_make_room() -> None:
    f = facts_from_config(LLAMA_3_1_8B)
    # 64 sequences of 131,072 tokens need 64 x 17,179,869,184 B: far more than the 8B's weights free
    r = fit(f, Hardware(find_device("H100")), Layout(), context=131_072, concurrency=64)
    assert r.verdict == "does-not-fit"
    assert "more than all its weights" in r.reasons[-1]


def test_recipe_offload_is_reported() -> None:
    f = facts_from_config(LLAMA_3_1_8B)
    lay = Layout(tp=2, cpu_offload_bytes=4 * GIB)  # vLLM --cpu-offload-gb 4: per GPU
    r = fit(f, Hardware(find_device("RTX 4090"), 2, host_ram_bytes=64 * GIB), lay, context=8192)
    assert r.verdict == "fits-with-offload"
    assert r.weights_bytes_per_gpu == 16_060_522_496 // 2 - 4 * GIB
    assert r.host_ram_needed_bytes == 2 * 4 * GIB
    replicas = fit(f, Hardware(find_device("RTX 4090"), 2), Layout(dp=2), context=8192)
    assert (replicas.gpus_needed, replicas.weights_bytes_per_gpu) == (2, 16_060_522_496)


def test_speculative_tokens_raise_the_per_stream_ceiling() -> None:
    f = facts_from_config(LLAMA_3_1_8B)
    hw = Hardware(find_device("H200"))
    plain = decode_bound(f, hw, Layout(), context=2048)
    spec = decode_bound(f, hw, Layout(spec_tokens=3), context=2048)
    # dense model, batch 1: a verify step of 4 tokens reads the same bytes -> up to 4 tokens a step
    assert spec.tokens_per_step == 4
    assert spec.per_stream_tok_s == pytest.approx(4 * plain.per_stream_tok_s, rel=1e-3)


def test_rating_flags_rows_above_the_ceiling() -> None:
    f = facts_from_config(LLAMA_3_1_8B)
    hw = Hardware(find_device("H200"))
    ceiling = decode_bound(f, hw, context=1024).per_stream_tok_s  # 316.96 tok/s
    ok = rate_row(f, hw, None, Measured(context=1024, decode_tok_s=180.0, prefill_tok_s=20_000))
    assert not ok.implausible
    assert ok.decode_pct == round(100 * 180.0 / ceiling, 1)  # 56.8
    assert ok.prefill_pct is not None and ok.prefill_pct < 100
    bad = rate_row(f, hw, None, Measured(context=1024, decode_tok_s=400.0))
    assert bad.implausible and bad.decode_pct is not None and bad.decode_pct > 100
    assert "decode 400.0 tok/s > ceiling 317.0" in bad.why


def test_rating_reads_concurrent_rows_as_aggregate() -> None:
    f = facts_from_config(LLAMA_3_1_8B)
    hw = Hardware(find_device("H200"))
    agg = decode_bound(f, hw, context=1024, concurrency=8).aggregate_tok_s
    row = rate_row(f, hw, None, Measured(context=1024, concurrency=8, decode_tok_s=agg * 0.5))
    assert row.decode_pct == 50.0
    per_stream = rate_row(f, hw, None, Measured(1024, 8, None, agg * 0.5), decode_is_aggregate=False)
    assert per_stream.implausible  # half the aggregate as a per-stream figure is beyond the ceiling


def _recipe(**kw: Any) -> SimpleNamespace:
    base: dict[str, Any] = {
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "gpu_memory_utilization": None,
        "kv_cache_dtype": None,
        "max_model_len": None,
        "entrypoint": [],
        "args": [],
        "env": {},
    }
    return SimpleNamespace(**{**base, **kw})


def test_layout_from_fields_args_and_env() -> None:
    fields = layout_from_recipe(
        _recipe(tensor_parallel_size=2, gpu_memory_utilization=0.85, kv_cache_dtype="fp8")
    )
    assert (fields.tp, fields.gpu_memory_utilization, fields.kv_cache_dtype) == (2, 0.85, "fp8")
    args = layout_from_recipe(
        _recipe(
            args=[
                "--tensor-parallel-size=4",
                "--max-model-len",
                "65536",
                "--kv-cache-dtype",
                "fp8_e4m3",
                "--speculative-config",
                '{"method": "eagle3", "num_speculative_tokens": 3}',
                "--cpu-offload-gb",
                "8",
                "-dcp",
                "2",
            ]
        )
    )
    assert (args.tp, args.max_model_len, args.kv_cache_dtype, args.spec_tokens, args.dcp) == (
        4,
        65536,
        "fp8_e4m3",
        3,
        2,
    )
    assert args.cpu_offload_bytes == 8 * GIB
    env = layout_from_recipe(
        _recipe(env={"DS41_GPU_MEMORY_UTILIZATION": "0.92", "DS41_MAX_MODEL_LEN": "1048576", "X": "{ph}"})
    )
    assert (env.gpu_memory_utilization, env.max_model_len) == (0.92, 1_048_576)
    assert layout_from_recipe(_recipe(env={"MAX_MODEL_LEN": "{ctx}"})).max_model_len is None


def test_context_above_the_model_limit_is_noted() -> None:
    r = fit(facts_from_config(LLAMA_3_1_8B), Hardware(find_device("H200")), Layout(), context=262_144)
    assert any("above the model's own limit of 131,072" in reason for reason in r.reasons)


def test_kv_dtype_names() -> None:
    from lair.errors import FitError
    from lair.fit.kv import kv_layer_bytes

    f = facts_from_config(LLAMA_3_1_8B)
    # 2 x 8 heads x 128 x b per layer
    assert kv_layer_bytes(f, "fp8_inc") == 2048  # engine-specific fp8 variants are 1 byte
    assert kv_layer_bytes(f, "q4_0") == 2 * 8 * 128 * 18 / 32
    with pytest.raises(FitError, match="unknown KV cache dtype"):
        kv_layer_bytes(f, "zip")
