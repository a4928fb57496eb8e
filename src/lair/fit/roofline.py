"""Speed ceilings from physics: bytes over memory bandwidth, FLOPs over peak compute, and the tensor-
parallel all-reduces over the GPU link.

Decode (one step = one token for each of ``concurrency`` streams, or up to ``spec_tokens + 1`` with
speculative decoding), per GPU of a ``tp``-way group::

    weight bytes = dense weights (no input embedding table, no vision tower)
                   + routed experts x fraction touched by the step's tokens
    kv bytes     = concurrency x KV of one sequence at ``context`` (sliding layers capped at the window)
    memory time  = (weight bytes + kv bytes) / tp / bandwidth         (KV: per-GPU share, see kv.py)
    compute time = 2 x active matmul params x tokens + attention FLOPs, / tp / dense peak
    link time    = 2 all-reduces per layer x tokens x hidden x 2 bytes x 2(tp-1)/tp / link bandwidth
    step time    = max(memory, compute) + link;   per stream = (spec_tokens + 1) / step time

The fraction of experts a step touches: with ``routing="uniform"`` it is 1 - (1 - k/E)^tokens (tokens
routed independently, an estimate), with ``routing="min"`` it is k/E (every token picks the same
experts: the true lower bound on bytes, used for the implausibility flag). Pipeline stages run one after
another for one token; with enough streams they overlap, so the aggregate may reach ``pp`` x.

Prefill: ``2 x active matmul params`` FLOPs per token plus attention (QK^T and PV over the average
causal context P/2, capped at the window for sliding layers), over the dense peak of the format the
weights allow (FP8/FP4 weights on hardware with FP8/FP4 tensor cores; else BF16), summed over GPUs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from lair.fit.catalog import Device
from lair.fit.fit import Hardware, Layout, _kv_layout
from lair.fit.model_facts import ModelFacts

__all__ = ["DecodeBound", "PrefillBound", "decode_bound", "prefill_bound"]


@dataclass(frozen=True)
class DecodeBound:
    """The decode ceiling at one context and concurrency."""

    context: int
    concurrency: int
    tokens_per_step: int
    weight_bytes_per_gpu: float
    kv_bytes_per_gpu: float
    memory_s: float
    compute_s: float
    link_s: float
    step_s: float
    per_stream_tok_s: float
    aggregate_tok_s: float
    bound: str  # "memory" | "compute"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PrefillBound:
    """The prefill ceiling for prompts of ``prompt_tokens`` (``tok_s`` None: no FLOP figure published)."""

    prompt_tokens: int
    flops_per_token: float
    compute_format: str
    peak_flops_total: float | None
    tok_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def matmul_params(facts: ModelFacts, *, active: bool = True) -> int:
    """Parameters a token multiplies with (the input embedding is a lookup, not a matmul)."""
    params = facts.active_params if active else facts.total_params
    return params - (0 if facts.tied_embeddings else facts.vocab_size * facts.hidden_size)


def _expert_fraction(facts: ModelFacts, tokens: int, routing: str) -> float:
    if not facts.is_moe:
        return 1.0
    p = facts.experts_per_token / facts.n_experts
    return p if routing == "min" else 1.0 - (1.0 - p) ** tokens


def _attention_flops(facts: ModelFacts, context: float) -> float:
    """FLOPs of QK^T and PV for one query token attending to ``context`` tokens, all layers (sparse
    attention: ``index_topk`` tokens, plus the indexer's scores over every token)."""
    per_layer = 2 * facts.n_heads * (facts.qk_head_dim + facts.v_head_dim)
    window = facts.sliding_window or context
    full = min(context, facts.index_topk) if facts.index_topk else context
    flops = per_layer * (facts.full_layers * full + facts.sliding_layers * min(context, window))
    return flops + 2 * facts.index_n_heads * facts.index_head_dim * context * facts.full_layers


def _weight_read_bytes(facts: ModelFacts, tokens: int, routing: str) -> float:
    dense = facts.weight_bytes - facts.expert_bytes - facts.embedding_bytes - facts.extra_bytes
    return dense + facts.expert_bytes * _expert_fraction(facts, tokens, routing)


def _link_bytes_s(device: Device, link_gbs: float | None) -> float | None:
    return link_gbs * 1e9 if link_gbs else device.link_bytes_s()


def decode_bound(
    facts: ModelFacts,
    hw: Hardware,
    layout: Layout | None = None,
    *,
    context: int,
    concurrency: int = 1,
    routing: str = "uniform",
    link_gbs: float | None = None,
) -> DecodeBound:
    """Decode ceiling per stream and aggregate (see the module doc)."""
    lay = layout or Layout()
    dev = hw.device
    tokens = concurrency * (lay.spec_tokens + 1)
    weights = _weight_read_bytes(facts, tokens, routing) / lay.gpus
    kv = concurrency * _kv_layout(facts, lay).read_bytes(context) * lay.pp  # all stages, one GPU each
    memory_s = (weights * lay.pp + kv) / dev.bandwidth_bytes_s
    flops = tokens * (2 * matmul_params(facts) + _attention_flops(facts, context)) / lay.tp
    peak = dev.peak_flops(facts.compute_format)
    compute_s = flops / peak if peak else 0.0
    link_s = _link_seconds(facts, lay, tokens, _link_bytes_s(dev, link_gbs))
    step_s = max(memory_s, compute_s) + link_s
    per_stream = (lay.spec_tokens + 1) / step_s
    return DecodeBound(
        context=context,
        concurrency=concurrency,
        tokens_per_step=tokens,
        weight_bytes_per_gpu=weights,
        kv_bytes_per_gpu=kv / lay.pp,
        memory_s=memory_s,
        compute_s=compute_s,
        link_s=link_s,
        step_s=step_s,
        per_stream_tok_s=per_stream,
        aggregate_tok_s=per_stream * concurrency * min(lay.pp, concurrency),
        bound="memory" if memory_s >= compute_s else "compute",
    )


def _link_seconds(facts: ModelFacts, lay: Layout, tokens: int, link: float | None) -> float:
    if not link:
        return 0.0
    act = tokens * facts.hidden_size * 2  # one 16-bit activation row per token
    tp_bytes = 2 * facts.n_layers * act * 2 * (lay.tp - 1) / lay.tp if lay.tp > 1 else 0.0
    pp_bytes = (lay.pp - 1) * act
    return (tp_bytes + pp_bytes) / link


def prefill_bound(
    facts: ModelFacts, hw: Hardware, layout: Layout | None = None, *, prompt_tokens: int
) -> PrefillBound:
    """Prefill ceiling in prompt tokens per second over all GPUs of the replica."""
    lay = layout or Layout()
    lm_head = facts.vocab_size * facts.hidden_size
    per_token = 2 * (matmul_params(facts) - lm_head) + _attention_flops(facts, (prompt_tokens + 1) / 2)
    per_token += 2 * lm_head / prompt_tokens  # logits for the last prompt token only
    peak = hw.device.peak_flops(facts.compute_format)
    total = peak * lay.gpus if peak else None
    return PrefillBound(
        prompt_tokens=prompt_tokens,
        flops_per_token=per_token,
        compute_format=facts.compute_format,
        peak_flops_total=total,
        tok_s=total / per_token if total else None,
    )
