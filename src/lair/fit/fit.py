"""Memory fit per GPU: weights + runtime overhead + KV cache against the engine's memory fraction.

Per GPU of a replica of ``tp x pp`` GPUs::

    budget      = gpu_memory_utilization x device memory
    weights     = (weight_bytes - offloaded) / (tp x pp)
    overhead    = runtime fixed cost + activation peak of one scheduler step (see Runtime)
    kv_budget   = budget - weights - overhead
    kv_pool     = tokens kv_budget holds in the full-attention layers (one sequence's sliding windows
                  set aside; without sliding layers simply kv_budget / KV bytes per token per GPU)
    max_context = longest single sequence whose KV fits kv_budget (sliding layers capped at the window)

The verdict compares the KV a run needs (``concurrency`` sequences of ``context`` tokens) with
``kv_budget``. When it does not fit and the device has its own memory (not unified), the shortfall can
move to host RAM (weights offloaded): "fits-with-offload" with the host RAM it needs; else
"does-not-fit". Every deciding number is in the result.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from lair.errors import FitError
from lair.fit.catalog import GIB, Device
from lair.fit.kv import KvLayout
from lair.fit.model_facts import ModelFacts

__all__ = ["FitResult", "Hardware", "Layout", "Runtime", "fit", "runtime_overhead_bytes"]

FITS, OFFLOAD, NO_FIT = "fits", "fits-with-offload", "does-not-fit"


@dataclass(frozen=True)
class Hardware:
    """The GPUs a model runs on: one device model, how many, and (if known) host RAM per node."""

    device: Device
    gpus: int = 1
    host_ram_bytes: int | None = None
    memory_bytes: int | None = None  # overrides the catalog's memory (e.g. a 96 GB Mac Studio)

    @property
    def gpu_memory_bytes(self) -> int:
        return self.memory_bytes or self.device.memory_bytes


@dataclass(frozen=True)
class Layout:
    """How a recipe places the model: parallelism, memory fraction, cache format, limits."""

    tp: int = 1
    pp: int = 1
    dp: int = 1  # data-parallel replicas (each holds the whole model over tp x pp GPUs)
    dcp: int = 1
    gpu_memory_utilization: float = 0.9
    kv_cache_dtype: str | None = None  # None / "auto" = the model's own (16-bit unless the checkpoint says)
    sliding_kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    cpu_offload_bytes: int = (
        0  # weights the recipe itself keeps in host RAM, per GPU (vLLM's --cpu-offload-gb)
    )
    spec_tokens: int = 0  # speculative tokens per step (a step can emit up to spec_tokens + 1)
    expert_offload: bool = False  # routed experts may live in host RAM (and past that, on SSD)
    expert_cache_slots: int = 0  # per GPU: GPU slots caching offloaded experts (one routed expert each)
    ssd_offload: bool = False  # experts that host RAM cannot hold are read from SSD on demand
    ssd_tables_bytes: int = 0  # tables read from SSD on demand, never in GPU memory (e.g. Engram n-grams)

    @property
    def gpus(self) -> int:
        """GPUs of one replica (the model is split over these)."""
        return self.tp * self.pp


@dataclass(frozen=True)
class Runtime:
    """Engine memory besides weights and KV (defaults: a vLLM-like server).

    ``fixed_bytes``: CUDA context, cuBLAS/NCCL workspaces, allocator slack. Activations: one scheduler
    step of ``batched_tokens`` tokens holds, per token, 16-bit copies of the residual stream and its
    norm (2 x hidden), the q/k/v/attention outputs (4 x hidden / tp) and the MLP's gate/up/act outputs
    (3 x ffn / tp, ffn = intermediate or experts_per_token x moe_intermediate); the sampler holds fp32
    logits for ``sampler_rows`` rows.
    """

    fixed_bytes: int = GIB
    batched_tokens: int = 8192
    sampler_rows: int = 256


def runtime_overhead_bytes(facts: ModelFacts, layout: Layout, rt: Runtime, ffn: int = 0) -> int:
    """Bytes per GPU besides weights and KV (see :class:`Runtime`)."""
    ffn = ffn or _ffn_width(facts)
    per_token = 2 * (2 * facts.hidden_size + (4 * facts.hidden_size + 3 * ffn) / layout.tp)
    logits = 4 * min(rt.sampler_rows, rt.batched_tokens) * facts.vocab_size / layout.tp
    return int(rt.fixed_bytes + rt.batched_tokens * per_token + logits)


def _ffn_width(facts: ModelFacts) -> int:
    dense = facts.intermediate_size if facts.moe_layers < facts.n_layers else 0
    routed = facts.moe_intermediate_size * (facts.experts_per_token + facts.n_shared_experts)
    return max(dense, routed) or 4 * facts.hidden_size


@dataclass
class FitResult:
    """The fit of one model on one piece of hardware under one layout; numbers are per GPU."""

    model: str
    device: str
    gpus_needed: int
    gpus_available: int
    budget_bytes_per_gpu: int
    weights_bytes_per_gpu: int
    overhead_bytes_per_gpu: int
    kv_budget_bytes_per_gpu: int
    kv_dtype: str
    kv_bytes_per_token: float
    kv_bytes_per_token_per_gpu: float
    kv_pool_tokens: int
    max_context: int  # -1: no KV limit (every layer slides); capped by the model's own limit
    model_max_context: int
    context: int
    concurrency: int
    kv_needed_bytes_per_gpu: int
    max_concurrency_at_context: int
    offload_bytes: int  # weights that must live in host RAM (all GPUs together)
    host_ram_needed_bytes: int
    disk_needed_bytes: int
    verdict: str
    ssd_offload_bytes: int = 0  # weights read from SSD on demand (all GPUs together)
    expert_cache_bytes_per_gpu: int = 0  # GPU slots caching offloaded experts
    before_offload: dict[str, int] = field(default_factory=dict)
    """Per GPU, before any weight moved off the GPUs: weights, kv_budget (the numbers that decided)."""
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _kv_layout(facts: ModelFacts, layout: Layout) -> KvLayout:
    dtype = layout.kv_cache_dtype if layout.kv_cache_dtype not in (None, "auto") else facts.kv_cache_dtype
    return KvLayout(facts, dtype or "auto", layout.sliding_kv_cache_dtype, layout.tp, layout.pp, layout.dcp)


def _required_context(facts: ModelFacts, layout: Layout, context: int | None) -> int:
    ctx = context or layout.max_model_len or facts.max_context
    if not ctx:
        raise FitError("no context length to fit", hint="pass --context N (the model sets no limit)")
    return int(ctx)


def fit(
    facts: ModelFacts,
    hw: Hardware,
    layout: Layout | None = None,
    *,
    context: int | None = None,
    concurrency: int = 1,
    runtime: Runtime | None = None,
) -> FitResult:
    """Size ``facts`` on ``hw`` under ``layout``; ``context`` defaults to the layout's max_model_len,
    then the model's own limit. When weights must move to host RAM, the KV numbers are those after
    the move."""
    lay = layout or Layout()
    kv = _kv_layout(facts, lay)
    ctx = _required_context(facts, lay, context)
    res = FitResult(
        model=facts.name,
        device=hw.device.name,
        gpus_needed=lay.gpus * lay.dp,
        gpus_available=hw.gpus,
        budget_bytes_per_gpu=int(lay.gpu_memory_utilization * hw.gpu_memory_bytes),
        weights_bytes_per_gpu=0,
        overhead_bytes_per_gpu=runtime_overhead_bytes(facts, lay, runtime or Runtime()),
        kv_budget_bytes_per_gpu=0,
        kv_dtype=str(kv.dtype),
        kv_bytes_per_token=kv.bytes_per_token,
        kv_bytes_per_token_per_gpu=kv.bytes_per_token_per_gpu,
        kv_pool_tokens=0,
        max_context=0,
        model_max_context=facts.max_context,
        context=ctx,
        concurrency=concurrency,
        kv_needed_bytes_per_gpu=int(kv.sequence_bytes(ctx) * concurrency),
        max_concurrency_at_context=0,
        offload_bytes=lay.cpu_offload_bytes * lay.gpus * lay.dp,
        host_ram_needed_bytes=lay.cpu_offload_bytes * lay.gpus * lay.dp,
        disk_needed_bytes=facts.weight_bytes + lay.ssd_tables_bytes,
        verdict=FITS,
    )
    res.expert_cache_bytes_per_gpu = _expert_cache_bytes(facts, lay)
    weights = (
        math.ceil(facts.weight_bytes / lay.gpus) - lay.cpu_offload_bytes + res.expert_cache_bytes_per_gpu
    )
    _fill_kv(res, kv, weights)
    res.before_offload = {
        "weights_bytes_per_gpu": weights,
        "kv_budget_bytes_per_gpu": res.kv_budget_bytes_per_gpu,
    }
    _decide(res, hw, lay, _movable_per_gpu(facts, lay, weights))
    moved_per_gpu = ((res.offload_bytes + res.ssd_offload_bytes) // res.gpus_needed) - lay.cpu_offload_bytes
    if moved_per_gpu > 0:
        _fill_kv(res, kv, weights - moved_per_gpu)
    return res


def expert_bytes_each(facts: ModelFacts) -> int:
    """Bytes of one routed expert of one layer (all routed experts / (experts x MoE layers))."""
    n = facts.n_experts * facts.moe_layers
    return facts.expert_bytes // n if n else 0


def _expert_cache_bytes(facts: ModelFacts, lay: Layout) -> int:
    return lay.expert_cache_slots * expert_bytes_each(facts) if lay.expert_offload else 0


def _movable_per_gpu(facts: ModelFacts, lay: Layout, weights: int) -> int:
    """What may leave a GPU: with expert offload only routed experts (the rest must stay), else every
    weight (vLLM's --cpu-offload-gb moves any layer)."""
    if lay.expert_offload and facts.expert_bytes:
        return max(0, math.ceil(facts.expert_bytes / lay.gpus) - lay.cpu_offload_bytes)
    return weights


def _fill_kv(r: FitResult, kv: KvLayout, weights: int) -> None:
    """Set the weight share and everything that follows from the KV budget it leaves."""
    r.weights_bytes_per_gpu = weights
    budget = r.budget_bytes_per_gpu - weights - r.overhead_bytes_per_gpu
    r.kv_budget_bytes_per_gpu = budget
    r.kv_pool_tokens = kv.pool_tokens(budget)
    r.max_context = _cap(kv.max_context(budget), r.model_max_context)
    r.max_concurrency_at_context = max(0, int(budget // kv.sequence_bytes(r.context))) if budget > 0 else 0


def _cap(fitting: int, model_limit: int) -> int:
    if fitting < 0:
        return model_limit or -1
    return min(fitting, model_limit) if model_limit else fitting


def _gib(n: float) -> str:
    return f"{n / GIB:,.2f} GiB"


def _decide(r: FitResult, hw: Hardware, lay: Layout, movable: int) -> None:
    if hw.gpus < r.gpus_needed:
        r.verdict = NO_FIT
        r.reasons.append(
            f"needs {r.gpus_needed} GPUs (tp {lay.tp} x pp {lay.pp} x dp {lay.dp}); "
            f"the hardware has {hw.gpus}"
        )
        return
    cache = (
        f" (incl. expert cache {_gib(r.expert_cache_bytes_per_gpu)})" if r.expert_cache_bytes_per_gpu else ""
    )
    r.reasons.append(
        f"per GPU, all weights on the GPUs: budget {_gib(r.budget_bytes_per_gpu)} "
        f"({lay.gpu_memory_utilization:g} x {_gib(hw.gpu_memory_bytes)}) - weights "
        f"{_gib(r.weights_bytes_per_gpu)}{cache} - overhead {_gib(r.overhead_bytes_per_gpu)} = KV budget "
        f"{_gib(r.kv_budget_bytes_per_gpu)}"
    )
    r.reasons.append(
        f"KV for {r.concurrency} x {r.context:,} tokens needs {_gib(r.kv_needed_bytes_per_gpu)} per GPU"
    )
    if r.model_max_context and r.context > r.model_max_context:
        r.reasons.append(
            f"note: {r.context:,} tokens is above the model's own limit of {r.model_max_context:,} "
            "(engines refuse it without rope scaling)"
        )
    shortfall = r.kv_needed_bytes_per_gpu - r.kv_budget_bytes_per_gpu
    if shortfall <= 0:
        r.verdict = OFFLOAD if lay.cpu_offload_bytes > 0 else FITS
        if lay.cpu_offload_bytes:
            r.reasons.append(f"the recipe keeps {_gib(r.offload_bytes)} of weights in host RAM")
        _check_host_ram(r, hw, lay)
        return
    _offload(r, hw, lay, shortfall, movable)


def _offload(r: FitResult, hw: Hardware, lay: Layout, shortfall: int, movable: int) -> None:
    what = "routed experts" if lay.expert_offload else "weights"
    if hw.device.kind == "unified":
        r.verdict = NO_FIT
        r.reasons.append(
            f"short by {_gib(shortfall)} per GPU; unified memory has no separate host RAM to offload to"
        )
        return
    if shortfall > movable:
        r.verdict = NO_FIT
        r.reasons.append(f"short by {_gib(shortfall)} per GPU, more than all its {what} ({_gib(movable)})")
        return
    r.offload_bytes += shortfall * r.gpus_needed
    r.host_ram_needed_bytes = r.offload_bytes
    r.verdict = OFFLOAD
    r.reasons.append(
        f"short by {_gib(shortfall)} per GPU: {_gib(shortfall * r.gpus_needed)} of {what} in total "
        f"({_gib(shortfall)} per GPU) must leave the GPUs"
    )
    _check_host_ram(r, hw, lay)
    if r.verdict == OFFLOAD:
        r.reasons.append(
            f"per GPU after the move: weights {_gib(r.weights_bytes_per_gpu - shortfall)}, KV budget "
            f"{_gib(r.kv_budget_bytes_per_gpu + shortfall)}"
        )


def _check_host_ram(r: FitResult, hw: Hardware, lay: Layout) -> None:
    ram = hw.host_ram_bytes
    if not r.offload_bytes or ram is None or r.host_ram_needed_bytes <= ram:
        return
    if lay.ssd_offload:
        to_ssd = r.host_ram_needed_bytes - ram
        r.offload_bytes, r.ssd_offload_bytes, r.host_ram_needed_bytes = ram, to_ssd, ram
        r.reasons.append(
            f"host RAM holds {_gib(ram)} (all of it); the other {_gib(to_ssd)} of experts are read from SSD"
        )
        return
    r.verdict = NO_FIT
    r.reasons.append(f"host RAM {_gib(ram)} < {_gib(r.host_ram_needed_bytes)} needed to offload")
