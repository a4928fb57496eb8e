"""Model facts from the Hub by name, no download: the real ``huggingface_hub`` against a local server
that answers the Hub's routes (:mod:`lair.testing.hub_server`) from a repo this module writes.

The fake ``Qwen/Qwen3-30B-A3B`` has the real model's config.json and 16 safetensors shards whose
headers list the real model's 18,867 tensors with their shapes (the data is a hole in a sparse file:
each shard is gigabytes long, so a download would show in the bytes the server counts)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lair.errors import HubAuthError, HubOfflineError
from lair.fit import read_model_facts
from lair.fit.hub_facts import HubAccess, HubRef, facts_by_name, parse_hub_ref, read_hub_facts
from lair.testing.cli import lair
from lair.testing.hub_server import HubServer, serve_hub

QWEN = "Qwen/Qwen3-30B-A3B"
# The same repo under a name lair does not bundle: `lair fit` reads a bundled name from lair's own
# table (no network), so the CLI tests of the Hub path name this one.
HUB_ONLY = "acme/Qwen3-30B-A3B-copy"
# huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
QWEN3_30B_A3B: dict[str, Any] = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
SHARDS = 16
QWEN_PARAMS = 0  # what the shards hold, set when they are written


def _layer_tensors(i: int, c: dict[str, Any]) -> dict[str, list[int]]:
    h, q, kv, e = c["hidden_size"], c["num_attention_heads"] * 128, c["num_key_value_heads"] * 128, 768
    p = f"model.layers.{i}."
    out = {p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h]}
    out |= {p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h]}
    out |= {p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q]}
    out |= {p + "self_attn.q_norm.weight": [128], p + "self_attn.k_norm.weight": [128]}
    out[p + "mlp.gate.weight"] = [c["num_experts"], h]
    for x in range(c["num_experts"]):
        ex = f"{p}mlp.experts.{x}."
        out |= {
            ex + "gate_proj.weight": [e, h],
            ex + "up_proj.weight": [e, h],
            ex + "down_proj.weight": [h, e],
        }
    return out


def write_safetensors(path: Path, tensors: dict[str, list[int]]) -> int:
    """A safetensors file of BF16 ``tensors`` as the format documents it (8-byte little-endian header
    length, the JSON header, the data); the data is a hole (sparse). Returns the file's size."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, shape in tensors.items():
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + off)
    return 8 + len(raw) + off


def write_qwen3_repo(folder: Path) -> int:
    """The full local copy: config.json, 16 shards, the index. Returns the parameters it holds."""
    folder.mkdir(parents=True)
    c = QWEN3_30B_A3B
    (folder / "config.json").write_text(json.dumps(c, indent=2))
    groups: list[dict[str, list[int]]] = [{} for _ in range(SHARDS)]
    groups[0]["model.embed_tokens.weight"] = [c["vocab_size"], c["hidden_size"]]
    for i in range(c["num_hidden_layers"]):
        groups[i * SHARDS // c["num_hidden_layers"]] |= _layer_tensors(i, c)
    groups[-1] |= {
        "model.norm.weight": [c["hidden_size"]],
        "lm_head.weight": [c["vocab_size"], c["hidden_size"]],
    }
    weight_map, total = {}, 0
    for k, tensors in enumerate(groups, 1):
        name = f"model-{k:05d}-of-{SHARDS:05d}.safetensors"
        total += write_safetensors(folder / name, tensors)
        weight_map |= dict.fromkeys(tensors, name)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return sum(int(np.prod(shape)) for g in groups for shape in g.values())


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    root = tmp_path_factory.mktemp("hub-repos")
    global QWEN_PARAMS
    QWEN_PARAMS = write_qwen3_repo(root / "qwen3")
    with serve_hub() as server:
        server.add_repo(QWEN, root / "qwen3")
        server.add_repo(HUB_ONLY, root / "qwen3")
        yield server


def _access(hub: HubServer, cache: Path, **kw: Any) -> HubAccess:
    return HubAccess(endpoint=hub.url, cache_dir=cache, token=False, **{"offline": False, **kw})


def test_hub_ids_are_told_from_paths() -> None:
    assert parse_hub_ref("Qwen/Qwen3-30B-A3B") == HubRef("Qwen/Qwen3-30B-A3B")
    assert parse_hub_ref("Qwen/Qwen3-30B-A3B@v1.0") == HubRef("Qwen/Qwen3-30B-A3B", "v1.0")
    got = parse_hub_ref("unsloth/Qwen3-30B-A3B-GGUF:Qwen3-30B-A3B-Q4_K_M.gguf")
    assert got == HubRef("unsloth/Qwen3-30B-A3B-GGUF", None, "Qwen3-30B-A3B-Q4_K_M.gguf")
    for not_an_id in ("./models/x", "/models/x", "~/x/y", "recipe.toml", "a/b/c", "{org}/x"):
        assert parse_hub_ref(not_an_id) is None, not_an_id


def test_facts_over_http_equal_the_full_local_copy(hub: HubServer, tmp_path: Path) -> None:
    before = len(hub.sent)
    got = read_hub_facts(HubRef(QWEN), _access(hub, tmp_path / "hf"))
    sent = hub.sent[before:]
    local = read_model_facts(hub.repos[QWEN].folder)
    assert replace(got, source="", name="") == replace(local, source="", name="")
    assert got.n_experts == 128 and got.experts_per_token == 8 and got.n_layers == 48
    assert got.weight_bytes == 2 * QWEN_PARAMS  # every tensor BF16, counted from the shapes written
    assert f"{QWEN}@{hub.repos[QWEN].commit}" in got.source and "16 safetensors header(s)" in got.source
    assert max(s.body_bytes for s in sent) < 1_000_000
    assert sum(s.body_bytes for s in sent) < 5_000_000  # 16 headers of ~140 KB, a config, an index
    assert {s.path.rsplit("/", 1)[-1] for s in sent if "/resolve/" in s.path} >= {"config.json"}


def _env(hub: HubServer, cache: Path, **extra: str) -> dict[str, str]:
    return {
        "HF_ENDPOINT": hub.url,
        "HF_HUB_CACHE": str(cache),
        "HF_TOKEN": "",
        "HF_HUB_OFFLINE": "0",
        **extra,
    }


def test_lair_fit_by_name_over_the_hub_then_offline(hub: HubServer, tmp_path: Path) -> None:
    """The issue's example, a real ``lair`` process, its settings from huggingface_hub's env names."""
    cache, argv = tmp_path / "hf", (HUB_ONLY, "--gpu", "RTX 3090", "--gpus", "2", "--json")
    before = len(hub.sent)
    res = lair("fit", *argv, env=_env(hub, cache))
    assert res.returncode in (0, 1), res.stderr  # 1: does not fit (61 GB of BF16 on 2 x 24 GB)
    out = json.loads(res.stdout)
    assert max(s.body_bytes for s in hub.sent[before:]) < 1_000_000
    local = read_model_facts(hub.repos[HUB_ONLY].folder).as_dict()
    assert {k: v for k, v in out["model_facts"].items() if k not in ("name", "source")} == {
        k: v for k, v in local.items() if k not in ("name", "source")
    }
    src = out["model_source"]
    assert (src["kind"], src["where"]) == ("hub", f"{HUB_ONLY}@{hub.repos[HUB_ONLY].commit}")
    assert src["facts"]["n_experts"] == "config.json"
    assert src["facts"]["weight_bytes"].startswith("16 safetensors header(s)")
    # offline, warm cache: the same facts, no request
    before = len(hub.sent)
    res = lair("fit", *argv, env=_env(hub, cache, HF_HUB_OFFLINE="1"))
    assert json.loads(res.stdout)["model_facts"]["weight_bytes"] == local["weight_bytes"], res.stderr
    assert len(hub.sent) == before
    text = lair("fit", *argv[:-1], env=_env(hub, cache, HF_HUB_OFFLINE="1")).stdout
    assert f"facts from: hub {HUB_ONLY}@{hub.repos[HUB_ONLY].commit} (config.json; 16 safetensors" in text


def test_offline_with_a_cold_cache_is_a_clean_error(hub: HubServer, tmp_path: Path) -> None:
    with pytest.raises(HubOfflineError, match=r"Qwen/Qwen3-30B-A3B: not in the local Hugging Face cache"):
        read_hub_facts(HubRef(QWEN), _access(hub, tmp_path / "cold", offline=True))
    res = lair("fit", HUB_ONLY, "--gpu", "H200", env=_env(hub, tmp_path / "cold", HF_HUB_OFFLINE="1"))
    assert res.returncode == 1 and "HF_HUB_OFFLINE" in res.stderr and "Traceback" not in res.stderr


def test_a_bundled_name_asks_no_hub_unless_a_revision_is_named(hub: HubServer, tmp_path: Path) -> None:
    """Qwen3-30B-A3B is in lair's own table: online, with no local copy, `lair fit` reads it there and
    sends nothing; naming a revision (or a GGUF file) reads the Hub."""
    env, before = _env(hub, tmp_path / "hf"), len(hub.sent)
    res = lair("fit", QWEN, "--gpu", "H200", "--json", env=env)
    assert res.returncode == 0, res.stderr
    src = json.loads(res.stdout)["model_source"]
    assert src["kind"] == "bundled with lair"
    assert src["where"] == f"config.json of {QWEN} at main, checked 2026-12-08"
    assert len(hub.sent) == before
    res = lair("fit", f"{QWEN}@main", "--gpu", "H200", "--json", env=env)
    assert json.loads(res.stdout)["model_source"]["kind"] == "hub", res.stderr
    assert len(hub.sent) > before


def test_a_gated_repo_names_the_token(hub: HubServer, tmp_path: Path) -> None:
    folder = tmp_path / "gated"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN3_30B_A3B))
    hub.add_repo("acme/gated", folder, token="hf_right")
    with pytest.raises(HubAuthError, match=r"acme/gated: gated repo, access refused \(401\)") as exc:
        read_hub_facts(HubRef("acme/gated"), _access(hub, tmp_path / "hf"))
    assert "HF_TOKEN" in exc.value.hint and "hf auth login" in exc.value.hint
    with pytest.raises(HubAuthError, match=r"\(403\)"):
        read_hub_facts(HubRef("acme/gated"), replace(_access(hub, tmp_path / "hf"), token="hf_wrong"))
    got = read_hub_facts(HubRef("acme/gated"), replace(_access(hub, tmp_path / "hf"), token="hf_right"))
    assert got.n_experts == 128
    res = lair("fit", "acme/gated", "--gpu", "H200", env=_env(hub, tmp_path / "hf2", HF_TOKEN="hf_wrong"))
    assert res.returncode == 1 and "HF_TOKEN" in res.stderr and "hf_wrong" not in res.stderr + res.stdout


def _write_gguf(path: Path) -> None:
    """A small Qwen3-MoE GGUF by the gguf package's writer: 2 layers, 4 experts, 4 MB of tensors."""
    import gguf

    w = gguf.GGUFWriter(str(path), "qwen3moe")
    w.add_block_count(2)
    w.add_embedding_length(256)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_key_length(64)
    w.add_context_length(4096)
    w.add_expert_count(4)
    w.add_expert_used_count(2)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_token_list([f"t{i}" for i in range(512)])
    w.add_tensor("token_embd.weight", np.zeros((512, 256), np.float16))
    w.add_tensor("output.weight", np.zeros((512, 256), np.float16))
    for i in range(2):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((256, 256), np.float16))
        w.add_tensor(f"blk.{i}.ffn_up_exps.weight", np.zeros((4, 512, 256), np.float16))
        w.add_tensor(f"blk.{i}.ffn_down_exps.weight", np.zeros((4, 256, 512), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_a_gguf_header_by_range_requests(hub: HubServer, tmp_path: Path) -> None:
    folder = tmp_path / "gguf-repo"
    folder.mkdir()
    _write_gguf(folder / "tiny-moe-F16.gguf")
    hub.add_repo("acme/tiny-moe-GGUF", folder)
    before = len(hub.sent)
    got = facts_by_name("acme/tiny-moe-GGUF:tiny-moe-F16.gguf", _access(hub, tmp_path / "hf"))
    assert got is not None
    facts, source = got
    size = (folder / "tiny-moe-F16.gguf").stat().st_size
    sent = sum(s.body_bytes for s in hub.sent[before:])
    assert sent < size / 10, (sent, size)  # the header only: ~6 KB of a 4.6 MB file
    local = read_model_facts(folder / "tiny-moe-F16.gguf")
    assert replace(facts, name="", source="") == replace(local, name="", source="")
    assert (facts.n_experts, facts.weight_format, source.kind) == (4, "gguf:F16", "hub")
    # offline, from the cached header
    again = read_hub_facts(
        parse_hub_ref("acme/tiny-moe-GGUF:tiny-moe-F16.gguf"), _access(hub, tmp_path / "hf", offline=True)
    )  # type: ignore[arg-type]
    assert again.weight_bytes == local.weight_bytes


def test_a_cached_snapshot_layout_without_the_network(tmp_path: Path) -> None:
    """``hf download`` leaves models--ORG--NAME/{blobs, refs/main, snapshots/<commit>/...} (links to
    blobs): a full copy there is read from disk, no endpoint asked (this one does not exist)."""
    from lair.testing.hf_cache import write_hub_dataset

    files = {"config.json": json.dumps(QWEN3_30B_A3B).encode()}
    shard = tmp_path / "shard.safetensors"
    write_safetensors(shard, _layer_tensors(0, QWEN3_30B_A3B))
    with shard.open("rb") as f:  # the header alone: the blob a test can afford (the reader needs no more)
        raw = f.read(8)
        files["model.safetensors"] = raw + f.read(struct.unpack("<Q", raw)[0])
    snap = write_hub_dataset(tmp_path / "hub", QWEN, files, revision="c" * 40)
    entry = tmp_path / "hub" / "models--Qwen--Qwen3-30B-A3B"
    (tmp_path / "hub" / "datasets--Qwen--Qwen3-30B-A3B").rename(entry)
    access = HubAccess(endpoint="http://127.0.0.1:9", cache_dir=tmp_path / "hub", offline=False)
    got = facts_by_name(QWEN, access)
    assert got is not None
    facts, source = got
    assert (source.kind, source.where) == ("hf cache", str(entry / "snapshots" / snap.name))
    assert facts.name == QWEN and facts.n_layers == 48
    assert facts.expert_bytes == 128 * 3 * 768 * 2048 * 2  # layer 0's experts, BF16, from the header
