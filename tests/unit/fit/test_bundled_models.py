"""The model facts bundled with lair (``lair/fit/models.toml``) against an independent source: for
every entry the parameters counted from its config (:func:`lair.fit.facts_from_config`) against the
count its publisher states, within ``TOLERANCE``; aliases, sources and revisions are well formed.

Exceptions to the tolerance are listed in ``WIDER`` with the reason. Published figures are rounded
(``"24B"``); 3% covers that for every entry but the one named there. A multimodal model is counted
from its language model alone (``text_config``): Gemma 3's and Llama 4's vision towers (0.4B, ~1B)
are part of their published totals and still fall within 3%."""

from __future__ import annotations

import re
from typing import Any

import pytest

from lair.fit.bundled_models import BundledModel, bundled_models, find_bundled, name_key
from lair.fit.model_facts import ModelFacts

TOLERANCE = 0.03
WIDER = {
    # The card says "14B parameters"; the checkpoint holds 14.66B (40 x 5120 layers of 275M MLP + 65.5M
    # attention, two 100352 x 5120 tables; the Hub's page shows 14.7B): the card rounds down.
    "microsoft/phi-4": 0.05,
}
READ = {  # the config.json fields lair.fit reads (lair.fit.model_facts, lair.fit._quant)
    "model_type", "hidden_size", "intermediate_size", "intermediate_size_mlp", "moe_intermediate_size",
    "shared_expert_intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "vocab_size", "max_position_embeddings", "attention_bias", "tie_word_embeddings",
    "n_routed_experts", "num_local_experts", "num_experts", "num_experts_per_tok", "experts_per_token",
    "n_shared_experts", "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers",
    "interleave_moe_layer_step", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
    "v_head_dim", "sliding_window", "attention_chunk_size", "sliding_window_pattern", "use_sliding_window",
    "max_window_layers", "layer_types", "torch_dtype", "quantization_config", "text_config",
}  # fmt: skip
UNREAD_AS_WRITTEN = {"architectures", "rms_norm_eps", "rope_theta", "hidden_act"}  # the first three entries'
COMMIT = re.compile(r"^[0-9a-f]{40}$")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

MODELS = [m for m in bundled_models() if not m.test_only]
BY_REPO = pytest.mark.parametrize("m", MODELS, ids=[m.repo for m in MODELS])


def _published_active(m: BundledModel, f: ModelFacts) -> int:
    """The active parameters counted the way the publisher counts them."""
    embed = f.vocab_size * f.hidden_size
    left_out = {"all": 0, "without input embedding": embed, "without embeddings": 2 * embed}
    return f.active_params - left_out[m.published_active_basis]


def _near(counted: int, published_b: float, tolerance: float) -> bool:
    return abs(counted / (published_b * 1e9) - 1) <= tolerance


def test_the_table_covers_the_families() -> None:
    repos = {m.repo for m in MODELS}
    assert len(MODELS) >= 28
    for family in ("Llama-3.1", "Llama-3.3", "Llama-4", "Qwen2.5", "Qwen3-", "DeepSeek-V3", "DeepSeek-R1"):
        assert any(family in r for r in repos), family
    for family in ("gpt-oss", "gemma-3", "Mistral-Small", "Mistral-Large", "Mixtral", "phi-4", "GLM-4.5"):
        assert any(family in r for r in repos), family
    assert {"zai-org/GLM-4.6", "moonshotai/Kimi-K2-Instruct", "MiniMaxAI/MiniMax-M2"} <= repos


@BY_REPO
def test_counted_parameters_match_the_published_count(m: BundledModel) -> None:
    f = m.facts()
    assert m.published_params_b is not None
    tolerance = WIDER.get(m.repo, TOLERANCE)
    counted = f"{f.total_params / 1e9:.2f}B counted, {m.published_params_b}B published"
    assert _near(f.total_params, m.published_params_b, tolerance), counted


@BY_REPO
def test_moe_entries_activate_fewer_than_they_hold(m: BundledModel) -> None:
    f = m.facts()
    if m.published_active_b is None:
        assert not f.is_moe and f.active_params == f.total_params
        return
    assert f.is_moe and f.active_params < f.total_params
    active = _published_active(m, f)
    shown = f"{active / 1e9:.2f}B counted ({m.published_active_basis}), {m.published_active_b}B published"
    assert _near(active, m.published_active_b, TOLERANCE), shown


@BY_REPO
def test_every_alias_resolves_to_its_entry(m: BundledModel) -> None:
    for name in (m.repo, m.repo.lower(), *m.aliases, *(a.upper() for a in m.aliases)):
        assert find_bundled(name) == m, name


def test_no_two_entries_share_a_name() -> None:
    seen: dict[str, str] = {}
    for m in bundled_models():
        for key in {name_key(n) for n in (m.repo, *m.aliases)}:
            assert key not in seen, f"{m.repo} and {seen[key]} are both called {key!r}"
            seen[key] = m.repo


@BY_REPO
def test_sources_are_the_repo_config_json_at_a_revision(m: BundledModel) -> None:
    assert m.source == f"https://huggingface.co/{m.repo}/blob/{m.revision}/config.json"
    assert COMMIT.match(m.revision) or (m.revision == "main" and DATE.match(m.checked)), m.revision
    assert m.checked_against and m.published_source.startswith("https://")


@BY_REPO
def test_configs_hold_only_what_lair_fit_reads(m: BundledModel) -> None:
    def keys(cfg: dict[str, Any]) -> set[str]:
        return set(cfg) | set(cfg.get("text_config") or {})

    assert keys(m.config) <= READ | UNREAD_AS_WRITTEN


def test_the_test_fixture_entry_stays_unlisted_but_found() -> None:
    tiny = find_bundled("{MODEL_DIR}/tiny-llama.gguf")
    assert tiny is not None and tiny.repo == "lair/tiny-random-llama" and tiny.test_only
    assert tiny not in MODELS


def test_unknown_names_are_not_guessed() -> None:
    for name in ("Qwen/Qwen3-30B-A3B-FP8", "unsloth/Qwen3-30B-A3B", "qwen3", "llama", "", "recipe.toml"):
        assert find_bundled(name) is None, name


def test_llama4_interleaved_moe_shared_expert_and_chunked_attention() -> None:
    f = find_bundled("llama4:maverick").facts()  # type: ignore[union-attr]
    # 48 layers of 5120: attention 2 x 5120^2 + 2 x 5120 x 1024 = 62,914,560 and 2 norms 10,240; every
    # 2nd layer (24) MoE: 128 experts + 1 shared of 3 x 5120 x 8192 = 125,829,120, router 655,360;
    # the other 24 a dense MLP of intermediate_size_mlp: 3 x 5120 x 16384 = 251,658,240; embed and head
    # 2 x 202048 x 5120 = 2,068,971,520; final norm 5,120
    assert (f.moe_layers, f.n_experts, f.n_shared_experts, f.intermediate_size) == (24, 128, 1, 16384)
    assert f.total_params == 400_711_848_960
    assert f.active_params == 400_711_848_960 - 24 * 127 * 125_829_120  # 17,184,691,200
    # chunked attention (8192) on the RoPE layers; every 4th layer (NoPE) attends globally
    assert (f.sliding_window, f.sliding_layers) == (8192, 36)
    scout = find_bundled("llama4:scout").facts()  # type: ignore[union-attr]
    assert (scout.moe_layers, scout.n_experts, scout.n_shared_experts) == (48, 16, 1)
