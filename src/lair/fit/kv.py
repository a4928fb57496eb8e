"""KV-cache sizes: bytes per token by attention type and cache dtype, split over GPUs.

Per layer and token:

- MHA / GQA / MQA: ``2 (K and V) x kv_heads x head_dim x bytes``; under tensor parallel each GPU holds
  ``max(kv_heads / tp, 1)`` heads (KV heads are replicated when there are fewer than GPUs);
- MLA: the compressed latent, ``(kv_lora_rank + qk_rope_head_dim) x bytes``, the same on every
  tensor-parallel GPU (it has no head axis) unless decode context parallel (``dcp``) splits the tokens;
  with DeepSeek sparse attention (DSA) also the indexer key, ``index_head_dim`` fp8 bytes + a 4-byte
  scale; a decode step then reads only ``index_topk`` latents but every indexer key;
- sliding-window layers stop growing at the window: a sequence of ``L`` tokens holds
  ``min(L, window)`` tokens in them.

Pipeline parallel splits the layers: a GPU holds ``layers / pp`` of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from lair.fit._quant import kv_bytes_per_element
from lair.fit.model_facts import ModelFacts

__all__ = ["KvLayout", "kv_layer_bytes"]


def kv_layer_bytes(facts: ModelFacts, dtype: str | None, tp: int = 1) -> float:
    """Bytes one token takes in one layer's KV cache on one GPU of a ``tp``-way tensor-parallel group."""
    b = kv_bytes_per_element(dtype)
    if facts.attention == "mla":
        return (facts.kv_lora_rank + facts.qk_rope_head_dim) * b + _indexer_bytes(facts)
    heads_per_gpu = max(facts.n_kv_heads / tp, 1.0)
    return 2 * heads_per_gpu * facts.head_dim * b


def _indexer_bytes(facts: ModelFacts) -> float:
    return facts.index_head_dim + 4.0 if facts.index_topk else 0.0


@dataclass(frozen=True)
class KvLayout:
    """The KV cache of one model under a parallel layout, per GPU."""

    facts: ModelFacts
    dtype: str | None = None  # full-attention layers ("auto" = 16-bit)
    sliding_dtype: str | None = None  # sliding-window layers (default: same as ``dtype``)
    tp: int = 1
    pp: int = 1
    dcp: int = 1  # decode context parallel: tokens spread over this many of the TP GPUs

    def _per_token(self, layers: float, dtype: str | None) -> float:
        return kv_layer_bytes(self.facts, dtype, self.tp) * layers / self.pp / self.dcp

    @property
    def full_rate(self) -> float:
        """Bytes per token per GPU in the full-attention layers."""
        return self._per_token(self.facts.full_layers, self.dtype)

    @property
    def sliding_rate(self) -> float:
        """Bytes per token per GPU in the sliding-window layers (for the first ``window`` tokens)."""
        return self._per_token(self.facts.sliding_layers, self.sliding_dtype or self.dtype)

    @property
    def bytes_per_token_per_gpu(self) -> float:
        """Every layer counted: what one more token of a short sequence costs on one GPU."""
        return self.full_rate + self.sliding_rate

    @property
    def bytes_per_token(self) -> float:
        """Every layer counted, the whole model (all GPUs of one replica, no replication)."""
        f = self.facts
        full = kv_layer_bytes(f, self.dtype) * f.full_layers
        return full + kv_layer_bytes(f, self.sliding_dtype or self.dtype) * f.sliding_layers

    def sequence_bytes(self, context: int) -> float:
        """Bytes per GPU that one sequence of ``context`` tokens holds."""
        window = self.facts.sliding_window or context
        return self.full_rate * context + self.sliding_rate * min(context, window)

    def read_bytes(self, context: int) -> float:
        """Bytes per GPU one decode step reads from one sequence's KV at ``context`` tokens (sparse
        attention reads ``index_topk`` latents plus every indexer key)."""
        f = self.facts
        if not f.index_topk or context <= f.index_topk:
            return self.sequence_bytes(context)
        idx = _indexer_bytes(f) * f.full_layers / self.pp / self.dcp  # indexer keys per token, this GPU
        return (self.full_rate - idx) * f.index_topk + idx * context

    def pool_tokens(self, budget: float) -> int:
        """Tokens ``budget`` bytes per GPU hold in the full-attention layers, after one sequence's
        sliding windows are set aside (no sliding layers: simply budget / bytes per token). Every layer
        sliding: tokens at the every-layer rate."""
        if budget <= 0:
            return 0
        if self.full_rate <= 0:
            return int(budget // self.bytes_per_token_per_gpu)
        reserve = self.sliding_rate * self.facts.sliding_window
        return max(0, int((budget - reserve) // self.full_rate))

    def max_context(self, budget: float) -> int:
        """The longest single sequence whose KV fits ``budget`` bytes per GPU (0: none; -1: no limit)."""
        if budget <= 0:
            return 0
        if self.full_rate <= 0:  # every layer slides: KV stops growing at the window
            return (
                -1
                if self.sequence_bytes(self.facts.sliding_window) <= budget
                else int(budget // self.sliding_rate)
            )
        w = self.facts.sliding_window
        if w and self.sequence_bytes(w) <= budget:
            return int(w + (budget - self.sequence_bytes(w)) // self.full_rate)
        return int(budget // self.bytes_per_token_per_gpu)
