"""A random-weight Llama of Llama-3-8B's shape (GQA: 32 query heads, 8 KV heads, 32 layers, hidden 4096, ffn
14336) with a tiny vocabulary, in F16, written by lair's own tiny-model writer (``lair.testing.tiny_model``).

For the GPU sweep (``benchmarks/gpu_llamacpp_sweep.sh``): no download, about 14 GB. One layer's arrays are
reused for every layer (the GPU still holds and reads each layer's own copy). As in ``make_tiny_model``, the
output rows of tokens that do not decode to printable ASCII are zeroed, so greedy answers decode as text (the
bench's validity gate refuses U+FFFD). The writer gives the KV head count the query head count; GQA is set
here by wrapping ``add_head_count_kv``.

    PYTHONPATH=src python benchmarks/gpu_bigmodel.py OUT_DIR [--kv-heads 8] [--small]

Prints one JSON line: the shape, parameters, bytes and seconds taken.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--small", action="store_true", help="a 2-layer toy of the same layout (a smoke test)")
    a = ap.parse_args()

    import gguf
    import numpy as np

    from lair.testing import tiny_model as tm

    h, f, layers, heads, ctx = (256, 512, 2, 4, 4096) if a.small else (4096, 14336, 32, 32, 131072)
    kv = min(a.kv_heads, heads)
    hd = h // heads
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    tok = tm._tokenizer(512)
    voc = tok.get_vocab()
    with tempfile.TemporaryDirectory() as d:
        tok.save(d + "/t.json")
        merges = json.loads(Path(d, "t.json").read_text())["model"]["merges"]
    tok.save(str(a.out / "tokenizer.json"))
    rng = np.random.default_rng(0)

    def r(*s: int) -> np.ndarray:
        return (rng.standard_normal(s, dtype=np.float32) * 0.02).astype(np.float16)

    one = {
        "self_attn.q_proj": r(heads * hd, h),
        "self_attn.k_proj": r(kv * hd, h),
        "self_attn.v_proj": r(kv * hd, h),
        "self_attn.o_proj": r(h, heads * hd),
        "mlp.gate_proj": r(f, h),
        "mlp.up_proj": r(f, h),
        "mlp.down_proj": r(h, f),
    }
    ones = np.ones(h, np.float32)
    t = {
        "model.embed_tokens.weight": r(len(voc), h),
        "model.norm.weight": ones,
        "lm_head.weight": r(len(voc), h),
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = ones
        t[p + "post_attention_layernorm.weight"] = ones
        for k, arr in one.items():
            t[p + k + ".weight"] = arr
    tm._never_emit(t, tok, voc)  # the writer's own rule: only printable-ASCII tokens (and EOS) can win
    cfg = {
        "hidden_size": h,
        "intermediate_size": f,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "max_position_embeddings": ctx,
    }
    orig = gguf.GGUFWriter.add_head_count_kv
    gguf.GGUFWriter.add_head_count_kv = lambda self, n: orig(self, kv)  # type: ignore[method-assign]
    try:
        tm._write_gguf(a.out / "big.gguf", cfg, voc, merges, t)
    finally:
        gguf.GGUFWriter.add_head_count_kv = orig  # type: ignore[method-assign]
    n = int(sum(x.size for x in t.values()))
    size = (a.out / "big.gguf").stat().st_size
    print(
        json.dumps(
            {
                "model": str(a.out / "big.gguf"),
                "architecture": "llama",
                "layers": layers,
                "hidden": h,
                "ffn": f,
                "heads": heads,
                "kv_heads": kv,
                "head_dim": hd,
                "vocab": len(voc),
                "dtype": "F16 (norms F32)",
                "params": n,
                "bytes": size,
                "seconds": round(time.time() - t0, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
