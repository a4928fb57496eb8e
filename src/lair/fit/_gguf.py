"""Model facts from GGUF metadata and tensor infos (the ``gguf`` package's reader; weights stay mapped,
unread)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from lair.errors import FitError
from lair.fit.model_facts import ModelFacts

__all__ = ["read_gguf"]


def _fields(reader: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        try:
            out[key] = field.contents()
        except Exception:  # a field type the reader cannot decode: not one we need
            continue
    return out


def _int(meta: dict[str, Any], key: str, default: int = 0) -> int:
    v = meta.get(key, default)
    if isinstance(v, list):  # per-layer values (e.g. head_count_kv): take the largest
        v = max(v) if v else default
    return int(v)


def _sliding(meta: dict[str, Any], arch: str, layers: int) -> tuple[int, int]:
    window = _int(meta, f"{arch}.attention.sliding_window")
    if not window:
        return 0, 0
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list):  # one bool per layer: True = sliding
        return window, sum(1 for p in pattern if p)
    if arch == "gemma2":
        return window, (layers + 1) // 2
    if arch.startswith("gemma3"):
        return window, layers - layers // 6
    return window, layers


def _tensor_totals(readers: list[Any]) -> dict[str, Any]:
    params = expert_params = weight_bytes = expert_bytes = embed_bytes = 0
    has_output, types = False, Counter[str]()
    for reader in readers:
        for t in reader.tensors:
            n, b = int(t.n_elements), int(t.n_bytes)
            params, weight_bytes = params + n, weight_bytes + b
            if "_exps" in t.name:
                expert_params, expert_bytes = expert_params + n, expert_bytes + b
            if t.name == "token_embd.weight":
                embed_bytes = b
            has_output = has_output or t.name == "output.weight"
            if len(t.shape) >= 2:
                types[t.tensor_type.name] += b
    return {
        "params": params,
        "expert_params": expert_params,
        "weight_bytes": weight_bytes,
        "expert_bytes": expert_bytes,
        "embed_bytes": embed_bytes if has_output else 0,
        "tied": not has_output,
        "main_type": types.most_common(1)[0][0] if types else "F32",
    }


def _file_type(meta: dict[str, Any], main_type: str) -> str:
    ft = meta.get("general.file_type")
    if ft is None:
        return f"gguf:{main_type}"
    import gguf

    try:
        return "gguf:" + gguf.LlamaFileType(int(ft)).name.removeprefix("MOSTLY_")
    except ValueError:
        return f"gguf:{main_type}"


def read_gguf(paths: list[Path]) -> ModelFacts:
    """Facts of a GGUF model (all split parts together)."""
    try:
        import gguf
    except ImportError as exc:  # pragma: no cover - the engines extra brings it
        raise FitError("reading GGUF needs the gguf package", hint="pip install 'lair[engines]'") from exc
    readers = [gguf.GGUFReader(str(p), "r") for p in paths]
    meta = _fields(readers[0])
    arch = str(meta.get("general.architecture") or "")
    if not arch:
        raise FitError(f"{paths[0]}: GGUF without general.architecture")
    return _facts(meta, arch, _tensor_totals(readers), paths[0])


def _facts(meta: dict[str, Any], arch: str, tt: dict[str, Any], path: Path) -> ModelFacts:
    a = arch
    layers, hidden = _int(meta, f"{a}.block_count"), _int(meta, f"{a}.embedding_length")
    heads = _int(meta, f"{a}.attention.head_count")
    kv_heads = _int(meta, f"{a}.attention.head_count_kv", heads)
    key_len = _int(meta, f"{a}.attention.key_length", hidden // max(heads, 1))
    kv_lora, rope = _int(meta, f"{a}.attention.kv_lora_rank"), _int(meta, f"{a}.rope.dimension_count")
    experts, top_k = _int(meta, f"{a}.expert_count"), _int(meta, f"{a}.expert_used_count")
    window, n_sliding = _sliding(meta, a, layers)
    inactive = tt["expert_params"] * (experts - top_k) // experts if experts and top_k else 0
    vocab = len(meta.get("tokenizer.ggml.tokens") or []) or _int(meta, f"{a}.vocab_size")
    kind = "mla" if kv_lora else ("mqa" if kv_heads == 1 else "mha" if kv_heads == heads else "gqa")
    return ModelFacts(
        name=str(meta.get("general.name") or path.stem),
        architecture=a,
        n_layers=layers,
        hidden_size=hidden,
        n_heads=heads,
        n_kv_heads=kv_heads,
        head_dim=key_len,
        vocab_size=vocab,
        intermediate_size=_int(meta, f"{a}.feed_forward_length"),
        total_params=tt["params"],
        active_params=tt["params"] - inactive,
        weight_bytes=tt["weight_bytes"],
        expert_bytes=tt["expert_bytes"],
        embedding_bytes=tt["embed_bytes"],
        weight_format=_file_type(meta, tt["main_type"]),
        tied_embeddings=tt["tied"],
        attention=kind,
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope if kv_lora else 0,
        qk_head_dim=key_len,
        v_head_dim=_int(meta, f"{a}.attention.value_length", key_len),
        sliding_window=window,
        sliding_layers=n_sliding,
        n_experts=experts if top_k else 0,
        experts_per_token=top_k,
        n_shared_experts=_int(meta, f"{a}.expert_shared_count"),
        moe_layers=(layers - _int(meta, f"{a}.leading_dense_block_count")) if experts else 0,
        moe_intermediate_size=_int(
            meta, f"{a}.expert_feed_forward_length", _int(meta, f"{a}.feed_forward_length")
        ),
        max_context=_int(meta, f"{a}.context_length"),
        source=f"GGUF metadata + tensor infos ({path.name})",
    )
