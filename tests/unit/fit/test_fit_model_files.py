"""Model facts from files: a GGUF written here with the gguf writer, safetensors headers, the Hugging
Face cache layout."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fit_configs import LLAMA_3_1_8B

from lair.errors import FitError
from lair.fit import KvLayout, read_model_facts, resolve_model_path
from lair.testing.tiny_model import make_tiny_model


def _write_moe_gguf(path: Path) -> None:
    """A tiny Mixtral-style GGUF (llama.cpp stores Mixtral as arch "llama" with expert tensors)."""
    import gguf
    from gguf.quants import quantize

    q8 = gguf.GGMLQuantizationType.Q8_0
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-moe")
    w.add_block_count(2)
    w.add_embedding_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_feed_forward_length(128)
    w.add_context_length(4096)
    w.add_expert_count(4)
    w.add_expert_used_count(2)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)

    def add(name: str, shape: tuple[int, ...], kind: str) -> None:
        a = rng.standard_normal(shape).astype(np.float32)
        if kind == "q8":
            w.add_tensor(name, quantize(a, q8), raw_dtype=q8)
        else:
            w.add_tensor(name, a.astype(np.float16 if kind == "f16" else np.float32))

    add("token_embd.weight", (256, 64), "f16")
    for i in range(2):
        add(f"blk.{i}.attn_norm.weight", (64,), "f32")
        add(f"blk.{i}.attn_q.weight", (64, 64), "q8")
        add(f"blk.{i}.attn_k.weight", (32, 64), "q8")
        add(f"blk.{i}.attn_v.weight", (32, 64), "q8")
        add(f"blk.{i}.attn_output.weight", (64, 64), "q8")
        add(f"blk.{i}.ffn_norm.weight", (64,), "f32")
        add(f"blk.{i}.ffn_gate_inp.weight", (4, 64), "f32")
        add(f"blk.{i}.ffn_gate_exps.weight", (4, 128, 64), "q8")
        add(f"blk.{i}.ffn_up_exps.weight", (4, 128, 64), "q8")
        add(f"blk.{i}.ffn_down_exps.weight", (4, 64, 128), "q8")
    add("output_norm.weight", (64,), "f32")
    add("output.weight", (256, 64), "q8")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_metadata_and_tensor_types(tmp_path: Path) -> None:
    path = tmp_path / "tiny-moe-Q8_0.gguf"
    _write_moe_gguf(path)
    f = read_model_facts(path)
    assert (f.architecture, f.n_layers, f.hidden_size, f.n_heads, f.n_kv_heads, f.head_dim) == (
        "llama",
        2,
        64,
        4,
        2,
        16,
    )
    # params per layer: norms 64 + 64, router 4 x 64 = 256, q 4,096, k 2,048, v 2,048, o 4,096,
    # experts 3 x 4 x 128 x 64 = 98,304 -> 110,976; x 2 = 221,952; + embed 16,384 + output 16,384 + 64
    assert f.total_params == 254_784
    # experts 2 x 98,304 = 196,608 P, 2 of 4 used: inactive half = 98,304
    assert f.active_params == 156_480
    # bytes: Q8_0 = 34 B per 32 weights; per layer (12,288 + 98,304) / 32 x 34 = 117,504 + F32 384 x 4
    # -> 119,040; x 2 = 238,080; embed F16 32,768; output_norm 256; output 16,384 / 32 x 34 = 17,408
    assert f.weight_bytes == 288_512
    assert f.expert_bytes == 2 * 98_304 // 32 * 34  # 208,896
    assert f.embedding_bytes == 32_768  # untied: output.weight exists
    assert (f.n_experts, f.experts_per_token, f.moe_layers, f.max_context) == (4, 2, 2, 4096)
    assert f.weight_format == "gguf:Q8_0"
    # KV per token: 2 x 2 heads x 16 x 2 B x 2 layers = 256 B; llama.cpp q8_0 cache: 34/32 B each
    assert KvLayout(f, "f16").bytes_per_token == 256
    assert KvLayout(f, "q8_0").bytes_per_token == 2 * 2 * 16 * (34 / 32) * 2


def test_gguf_found_in_a_folder(tmp_path: Path) -> None:
    _write_moe_gguf(tmp_path / "model.gguf")
    assert read_model_facts(tmp_path).total_params == 254_784


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """Write a safetensors file whose data is zeros (only the header matters here)."""
    size = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, (dtype, shape) in tensors.items():
        n = size[dtype] * int(np.prod(shape))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        fh.write(b"\0" * off)


def test_safetensors_headers_split_bytes_by_role(tmp_path: Path) -> None:
    cfg = {**LLAMA_3_1_8B, "num_hidden_layers": 1, "vocab_size": 16, "hidden_size": 8}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _safetensors(
        tmp_path / "model-00001-of-00002.safetensors",
        {
            "model.embed_tokens.weight": ("BF16", [16, 8]),  # 256 B, input table (untied)
            "model.layers.0.self_attn.q_proj.weight": ("BF16", [8, 8]),  # 128 B
            "model.layers.0.mlp.experts.3.up_proj.weight": ("F8_E4M3", [4, 8]),  # 32 B routed expert
            "model.layers.0.mlp.shared_experts.up_proj.weight": ("BF16", [4, 8]),  # 64 B dense
        },
    )
    _safetensors(
        tmp_path / "model-00002-of-00002.safetensors",
        {
            "lm_head.weight": ("F32", [16, 8]),  # 512 B on disk, 256 B once loaded in 16 bits
            "vision_tower.blocks.0.weight": ("BF16", [8, 8]),  # 128 B, not run per text token
            "model.layers.1.eh_proj.weight": ("BF16", [8, 8]),  # layer past num_hidden_layers: MTP
        },
    )
    f = read_model_facts(tmp_path)
    assert f.weight_bytes == 256 + 128 + 32 + 64 + 256 + 128
    assert (f.expert_bytes, f.embedding_bytes, f.extra_bytes) == (32, 256, 128)
    assert "2 safetensors header(s)" in f.source


def test_tiny_model_folder_and_hf_cache_layout(tmp_path: Path) -> None:
    make_tiny_model(tmp_path / "tiny")
    hf = tmp_path / "tiny" / "hf"
    direct = read_model_facts(hf)
    cfg = json.loads((hf / "config.json").read_text())
    # the tiny model is stored as F32: an engine loads it in 16 bits, 2 B per parameter
    assert direct.weight_bytes == 2 * direct.total_params
    assert direct.n_layers == cfg["num_hidden_layers"]
    # Hugging Face cache: models--org--name/{refs/main, snapshots/<rev>/...}
    entry = tmp_path / "hub" / "models--acme--tiny"
    snap = entry / "snapshots" / "abc123"
    snap.parent.mkdir(parents=True)
    hf.rename(snap)
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("abc123\n")
    assert resolve_model_path(entry) == snap
    cached = read_model_facts(entry)
    assert cached.name == "acme/tiny"
    assert cached.weight_bytes == direct.weight_bytes


def test_index_total_size_without_shards(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_3_1_8B))
    index = {"metadata": {"total_size": 16_060_522_496}, "weight_map": {}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    f = read_model_facts(tmp_path)
    assert f.weight_bytes == 16_060_522_496
    assert "total_size" in f.source


def test_missing_model_is_a_fit_error(tmp_path: Path) -> None:
    with pytest.raises(FitError, match="does not exist"):
        read_model_facts(tmp_path / "nope")
    with pytest.raises(FitError, match=r"no config\.json"):
        read_model_facts(tmp_path)
