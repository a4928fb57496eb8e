"""Model facts read offline: parameters, layer shapes, attention type, MoE routing, weight format.

Sources, in order of trust:

- weight files: safetensors headers (the 8-byte length + JSON header only) give the bytes an engine
  loads, split into routed experts, input embedding, extra towers (vision/audio); GGUF tensor infos give
  exact parameter counts and quant types;
- ``config.json``: the architecture; parameters are counted from it analytically (see
  :func:`facts_from_config`), since packed quantized tensors hide their element counts.

A model folder, a Hugging Face cache entry (``models--org--name``, resolved through
``refs/main`` to ``snapshots/<rev>``), a GGUF file or a folder holding GGUF files are all accepted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from lair.fit._quant import WeightFormat, weight_format

__all__ = ["ModelFacts", "facts_from_config"]


@dataclass(frozen=True)
class ModelFacts:
    """What sizing and speed bounds need to know about a model.

    Byte fields are what sits in GPU memory once an engine loads the weights; ``expert_bytes``,
    ``embedding_bytes`` and ``extra_bytes`` are parts of ``weight_bytes``: all routed experts, the input
    embedding table when it is not tied to the output head (a lookup: not read per token), and towers
    that do not run per generated token (vision, audio).
    """

    name: str
    architecture: str
    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    total_params: int
    active_params: int  # per token: total minus the routed experts a token does not use
    weight_bytes: int
    expert_bytes: int = 0
    embedding_bytes: int = 0
    extra_bytes: int = 0
    weight_format: str = "bf16"
    compute_format: str = "bf16"  # math format the weights allow: "bf16" | "fp8" | "fp4"
    tied_embeddings: bool = False
    attention: str = "gqa"  # "mha" | "gqa" | "mqa" | "mla"
    kv_lora_rank: int = 0  # MLA: latent width cached per token and layer (plus the rope part)
    qk_rope_head_dim: int = 0
    qk_head_dim: int = 0  # per-head query/key width for attention FLOPs
    v_head_dim: int = 0
    index_topk: int = 0  # sparse attention (DeepSeek-V3.2 DSA): tokens each query attends to
    index_head_dim: int = 0  # its indexer's key width (cached per token and layer, fp8 + fp32 scale)
    index_n_heads: int = 0
    sliding_window: int = 0
    sliding_layers: int = 0  # layers that attend to the last ``sliding_window`` tokens only
    n_experts: int = 0
    experts_per_token: int = 0
    n_shared_experts: int = 0
    moe_layers: int = 0
    moe_intermediate_size: int = 0
    max_context: int = 0  # the model's own limit (max_position_embeddings / GGUF context_length)
    kv_cache_dtype: str | None = None  # a KV format the checkpoint itself asks for
    source: str = ""

    @property
    def full_layers(self) -> int:
        return self.n_layers - self.sliding_layers

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.weight_bytes / self.total_params if self.total_params else 0.0

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0 and self.experts_per_token > 0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bits_per_weight"] = round(self.bits_per_weight, 3)
        return d


# --------------------------------------------------------------------------------------------- config


def _get(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model under ``text_config``; merge it over the outer one."""
    inner = cfg.get("text_config") or cfg.get("llm_config") or {}
    merged = {**cfg, **inner}
    if "quantization_config" in cfg:
        merged["quantization_config"] = cfg["quantization_config"]
    return merged


@dataclass(frozen=True)
class _Shape:
    arch: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    inter: int
    tied: bool
    gated: bool
    attn_bias: bool
    experts: int
    top_k: int
    moe_inter: int
    shared: int
    shared_inter: int
    moe_layers: int
    q_lora: int
    kv_lora: int
    rope_dim: int
    nope_dim: int
    v_dim: int
    index_topk: int
    index_dim: int
    index_heads: int


_UNGATED = {"gpt2", "gpt_neox", "gptj", "opt", "falcon", "phi", "bloom", "starcoder2"}
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text"}
_SHARED_BY_DEFAULT = {"llama4_text": 1}  # Llama 4: one shared expert per MoE layer, no config field


def _moe_layers(cfg: dict[str, Any], layers: int, experts: int) -> int:
    if experts <= 0:
        return 0
    if isinstance(cfg.get("moe_layers"), list):  # Llama 4 (newer configs): the MoE layers by index
        return len(cfg["moe_layers"])
    if "interleave_moe_layer_step" in cfg:  # Llama 4: every step-th layer, counted from 1
        step = int(cfg["interleave_moe_layer_step"]) or 1
        return len(range(step - 1, layers, step))
    first_dense = int(_get(cfg, "first_k_dense_replace", default=0))
    freq = int(_get(cfg, "moe_layer_freq", "decoder_sparse_step", default=1)) or 1
    dense_only = set(_get(cfg, "mlp_only_layers", default=[]) or [])
    if "decoder_sparse_step" in cfg:
        return sum(1 for i in range(layers) if i not in dense_only and (i + 1) % freq == 0)
    return sum(1 for i in range(layers) if i >= first_dense and i % freq == 0 and i not in dense_only)


def _shape(cfg: dict[str, Any]) -> _Shape:
    arch = str(_get(cfg, "model_type", default="unknown"))
    layers = int(_get(cfg, "num_hidden_layers", "n_layer", "num_layers"))
    hidden = int(_get(cfg, "hidden_size", "n_embd", "d_model"))
    heads = int(_get(cfg, "num_attention_heads", "n_head"))
    kv_heads = 1 if cfg.get("multi_query") else int(_get(cfg, "num_key_value_heads", default=heads))
    experts = int(_get(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0))
    moe_inter = int(_get(cfg, "moe_intermediate_size", "intermediate_size", default=0))
    moe_layers = _moe_layers(cfg, layers, experts)
    # Llama 4: intermediate_size is the experts' width, intermediate_size_mlp the dense layers'
    dense_key = "intermediate_size_mlp" if moe_layers < layers else "intermediate_size"
    return _Shape(
        arch=arch,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=int(_get(cfg, "head_dim", default=hidden // heads)),
        vocab=int(cfg["vocab_size"]),
        inter=int(_get(cfg, dense_key, "intermediate_size", "n_inner", default=4 * hidden)),
        tied=bool(_get(cfg, "tie_word_embeddings", default=arch in _TIED_BY_DEFAULT)),
        gated=arch not in _UNGATED,
        attn_bias=bool(cfg.get("attention_bias") or arch in {"qwen2", "qwen2_moe"}),
        experts=experts,
        top_k=int(_get(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk", default=0)),
        moe_inter=moe_inter,
        shared=int(_get(cfg, "n_shared_experts", default=_SHARED_BY_DEFAULT.get(arch, 0))),
        shared_inter=int(_get(cfg, "shared_expert_intermediate_size", default=0)),
        moe_layers=moe_layers,
        q_lora=int(_get(cfg, "q_lora_rank", default=0)),
        kv_lora=int(_get(cfg, "kv_lora_rank", default=0)),
        rope_dim=int(_get(cfg, "qk_rope_head_dim", default=0)),
        nope_dim=int(_get(cfg, "qk_nope_head_dim", default=0)),
        v_dim=int(_get(cfg, "v_head_dim", default=0)),
        index_topk=int(_get(cfg, "index_topk", default=0)),
        index_dim=int(_get(cfg, "index_head_dim", default=0)),
        index_heads=int(_get(cfg, "index_n_heads", default=0)),
    )


def _attn_params(s: _Shape) -> tuple[int, int]:
    """(matrix params, other params: biases, sinks, latent norms) of one attention block."""
    if s.kv_lora:
        qk = s.nope_dim + s.rope_dim
        q = s.hidden * s.q_lora + s.q_lora * s.heads * qk if s.q_lora else s.hidden * s.heads * qk
        kv = s.hidden * (s.kv_lora + s.rope_dim) + s.kv_lora * s.heads * (s.nope_dim + s.v_dim)
        return q + kv + s.heads * s.v_dim * s.hidden + _indexer_params(s), s.q_lora + s.kv_lora
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    mats = 2 * s.hidden * q + 2 * s.hidden * kv
    bias = (q + 2 * kv + (s.hidden if s.arch == "gpt_oss" else 0)) if s.attn_bias else 0
    sinks = s.heads if s.arch == "gpt_oss" else 0
    return mats, bias + sinks


def _indexer_params(s: _Shape) -> int:
    """DSA lightning indexer: q from the q latent, one shared key, per-head weights."""
    if not s.index_topk:
        return 0
    return (
        (s.q_lora or s.hidden) * s.index_heads * s.index_dim
        + s.hidden * s.index_dim
        + s.hidden * s.index_heads
    )


def _mlp(hidden: int, inter: int, gated: bool) -> int:
    return (3 if gated else 2) * hidden * inter


def _moe_params(s: _Shape) -> tuple[int, int, int]:
    """(one routed expert's matrices, its bias params, shared-expert + router params) of one MoE layer."""
    expert = _mlp(s.hidden, s.moe_inter, s.gated)
    expert_bias = 2 * s.moe_inter + s.hidden if s.arch == "gpt_oss" else 0  # gate_up and down biases
    shared = s.shared * _mlp(s.hidden, s.moe_inter, s.gated)
    if s.shared_inter:  # Qwen2-MoE: one shared expert of its own size, with a 1-wide gate
        shared += _mlp(s.hidden, s.shared_inter, s.gated) + s.hidden
    router = s.hidden * s.experts + (s.experts if s.arch == "gpt_oss" else 0)
    return expert, expert_bias, shared + router


@dataclass(frozen=True)
class _Counts:
    total: int
    experts_all: int  # every routed expert, matrices + biases
    expert_mats: int  # every routed expert, matrices only
    linear: int  # every layer matrix (attention, MLPs, shared experts, routed experts)
    embed: int  # one vocab x hidden table


def _counts(s: _Shape) -> _Counts:
    attn_m, attn_o = _attn_params(s)
    expert, expert_bias, shared_router = _moe_params(s)
    dense_layers = s.layers - s.moe_layers
    expert_mats = s.moe_layers * s.experts * expert
    experts_all = expert_mats + s.moe_layers * s.experts * expert_bias
    shared_mats = s.moe_layers * (s.shared * _mlp(s.hidden, s.moe_inter, s.gated))
    shared_mats += s.moe_layers * (_mlp(s.hidden, s.shared_inter, s.gated) if s.shared_inter else 0)
    dense_mlp = dense_layers * _mlp(s.hidden, s.inter, s.gated)
    norms = s.layers * 2 * s.hidden + s.hidden
    embed = s.vocab * s.hidden
    total = (
        s.layers * (attn_m + attn_o)
        + dense_mlp
        + experts_all
        + s.moe_layers * shared_router
        + norms
        + embed * (1 if s.tied else 2)
    )
    linear = s.layers * attn_m + dense_mlp + expert_mats + shared_mats
    return _Counts(total, experts_all, expert_mats, linear, embed)


def _sliding(cfg: dict[str, Any], s: _Shape) -> tuple[int, int]:
    """(window, number of sliding-window layers)."""
    window = int(_get(cfg, "sliding_window", "attention_chunk_size", default=0) or 0)
    types = cfg.get("layer_types")
    if types:
        n = sum(1 for t in types if t in ("sliding_attention", "chunked_attention"))
        return (window, n) if window and n else (0, 0)
    if not window or cfg.get("use_sliding_window") is False:
        return 0, 0
    if s.arch == "llama4_text":  # chunked attention on the RoPE layers; every 4th (NoPE) is global
        rope = cfg.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(s.layers)]
        return window, sum(1 for r in rope[: s.layers] if r)
    if s.arch == "gemma2":
        return window, (s.layers + 1) // 2  # even layers are local, odd layers global
    if s.arch.startswith("gemma3"):
        pattern = int(_get(cfg, "sliding_window_pattern", default=6))
        return window, s.layers - s.layers // pattern
    if "max_window_layers" in cfg and cfg.get("use_sliding_window"):
        return window, max(0, s.layers - int(cfg["max_window_layers"]))
    return window, s.layers


def _kv_dtype_of(cfg: dict[str, Any]) -> str | None:
    qc = cfg.get("quantization_config") or {}
    scheme = qc.get("kv_cache_scheme") or {}
    if scheme.get("type") == "float" and int(scheme.get("num_bits") or 0) == 8:
        return "fp8"
    if str(qc.get("kv_cache_quant_algo") or "").upper() == "FP8":
        return "fp8"
    return None


def _analytic_bytes(c: _Counts, s: _Shape, fmt: WeightFormat) -> tuple[int, int]:
    """(all weight bytes, routed-expert bytes) counted from the config and the weight format."""
    quantized = c.expert_mats if fmt.scope == "experts" else c.linear
    head = 0 if s.tied else c.embed
    rest = c.total - quantized - head
    expert_bytes = c.expert_mats * fmt.bits / 8 + (c.experts_all - c.expert_mats) * 2
    return int(quantized * fmt.bits / 8 + head * fmt.head_bits / 8 + rest * 2), int(expert_bytes)


def facts_from_config(config: dict[str, Any], name: str = "") -> ModelFacts:
    """Facts counted from a Hugging Face ``config.json`` alone (weights assumed as the config declares).

    Parameters: embeddings (vocab x hidden, twice unless tied) + per layer the attention matrices
    (MLA: q_a/q_b or q, kv_a, kv_b, o), 2 RMS norms, and either a gated MLP (3 x hidden x intermediate)
    or a router + routed experts + shared experts. Biases only where the architecture has them.
    """
    cfg = _text_config(config)
    s = _shape(cfg)
    c = _counts(s)
    fmt = weight_format(cfg)
    window, n_sliding = _sliding(cfg, s)
    active = c.total - (c.experts_all // s.experts * (s.experts - s.top_k) if s.experts and s.top_k else 0)
    weight_bytes, expert_bytes = _analytic_bytes(c, s, fmt)
    return ModelFacts(
        name=name or str(cfg.get("_name_or_path") or s.arch),
        architecture=s.arch,
        n_layers=s.layers,
        hidden_size=s.hidden,
        n_heads=s.heads,
        n_kv_heads=s.kv_heads,
        head_dim=s.head_dim,
        vocab_size=s.vocab,
        intermediate_size=s.inter,
        total_params=c.total,
        active_params=active,
        weight_bytes=weight_bytes,
        expert_bytes=expert_bytes if s.moe_layers else 0,
        embedding_bytes=0 if s.tied else c.embed * 2,
        weight_format=fmt.name,
        compute_format=fmt.compute,
        tied_embeddings=s.tied,
        attention=_attention_kind(s),
        kv_lora_rank=s.kv_lora,
        qk_rope_head_dim=s.rope_dim,
        qk_head_dim=(s.nope_dim + s.rope_dim) if s.kv_lora else s.head_dim,
        v_head_dim=s.v_dim if s.kv_lora else s.head_dim,
        index_topk=s.index_topk,
        index_head_dim=s.index_dim,
        index_n_heads=s.index_heads,
        sliding_window=window,
        sliding_layers=n_sliding,
        n_experts=s.experts if s.moe_layers else 0,
        experts_per_token=s.top_k if s.moe_layers else 0,
        n_shared_experts=s.shared + (1 if s.shared_inter else 0),
        moe_layers=s.moe_layers,
        moe_intermediate_size=s.moe_inter if s.moe_layers else 0,
        max_context=int(_get(cfg, "max_position_embeddings", "n_positions", "seq_length", default=0)),
        kv_cache_dtype=_kv_dtype_of(cfg),
        source="config.json (analytic)",
    )


def _attention_kind(s: _Shape) -> str:
    if s.kv_lora:
        return "mla"
    if s.kv_heads == 1:
        return "mqa"
    return "mha" if s.kv_heads == s.heads else "gqa"
