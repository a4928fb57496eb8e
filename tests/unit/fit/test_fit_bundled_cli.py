"""``lair fit --list-models`` and ``lair fit NAME`` on the model facts bundled with lair: no network
(the Hub reader is replaced by one that fails the test), the source said; a recipe naming a bundled
model uses them too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import huggingface_hub.constants as hf_constants
import pytest

from lair.cli import main
from lair.fit.bundled_models import bundled_models

QWEN = "Qwen/Qwen3-30B-A3B"
WHERE = f"config.json of {QWEN} at main, checked 2026-12-08"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    rc = main(["fit", *argv])
    out = capsys.readouterr().out
    return rc, json.loads(out) if "--json" in argv else out


@pytest.fixture(autouse=True)
def no_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """An empty HF cache; any Hub read is recorded (and fails)."""
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    asked: list[str] = []

    def hub(ref: Any, access: Any) -> Any:
        asked.append(str(ref))
        raise AssertionError(f"the Hub was asked for {ref}")

    monkeypatch.setattr("lair.fit.hub_facts._read", hub)
    return asked


def test_list_models_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc, text = _run(capsys, "--list-models")
    assert rc == 0
    lines = {line.split()[0]: line for line in text.splitlines()}
    listed = [m for m in bundled_models() if not m.test_only]
    assert len(lines) == len(listed) and "lair/tiny-random-llama" not in lines
    assert "30.5B (3.4B active)" in lines[QWEN] and " MoE " in lines[QWEN] and "qwen3:30b-a3b" in lines[QWEN]
    assert " MLA MoE fp8 " in lines["deepseek-ai/DeepSeek-V3"]
    assert " dense " in lines["meta-llama/Llama-3.1-8B-Instruct"] and "llama3.1:8b" in text
    assert " mxfp4 " in lines["openai/gpt-oss-120b"]
    rc, rows = _run(capsys, "--list-models", "--json")
    by_repo = {r["repo"]: r for r in rows}
    q = by_repo[QWEN]
    assert (q["kind"], q["architecture"], q["weight_format"]) == ("MoE", "qwen3_moe", "bf16")
    # 48 layers of 2048: attention 2 x 2048 x 4096 + 2 x 2048 x 512 = 18,874,368, 2 norms 4,096, 128
    # experts of 3 x 2048 x 768 = 4,718,592 and a 262,144 router -> 623,120,384; embed and head
    # 2 x 151936 x 2048 = 622,329,856; final norm 2,048. A token leaves out 120 of the 128 experts.
    assert q["total_params"] == 48 * 623_120_384 + 622_329_856 + 2_048  # 30,532,110,336
    assert q["active_params"] == 30_532_110_336 - 48 * 120 * 4_718_592  # 3,353,020,416
    assert q["source"] == f"https://huggingface.co/{QWEN}/blob/main/config.json"
    assert (q["revision"], q["published_params_b"], q["published_active_b"]) == ("main", 30.5, 3.3)


def test_a_bundled_repo_without_a_local_copy_asks_no_hub(
    capsys: pytest.CaptureFixture[str], no_hub: list[str]
) -> None:
    rc, out = _run(capsys, QWEN, "--gpu", "H200", "--json")
    assert rc == 0 and no_hub == []
    assert out["model_source"]["kind"] == "bundled with lair"
    assert out["model_source"]["where"] == WHERE
    f = out["model_facts"]
    assert (f["name"], f["n_layers"], f["n_experts"], f["weight_format"]) == (QWEN, 48, 128, "bf16")
    assert f["weight_bytes"] == 2 * 30_532_110_336  # bf16
    rc, text = _run(capsys, QWEN, "--gpu", "H200")
    assert f"facts from: bundled: {WHERE}; weights counted from the architecture" in text


def test_aliases_and_tags_name_the_same_model(capsys: pytest.CaptureFixture[str], no_hub: list[str]) -> None:
    for name in ("qwen3:30b-a3b", "qwen/qwen3-30b-a3b", "QWEN3-30B-A3B"):
        rc, out = _run(capsys, name, "--gpu", "H200", "--json")
        assert rc == 0 and out["model_facts"]["name"] == QWEN, name
    rc, out = _run(capsys, "--model", "gpt-oss:120b", "--gpu", "H100", "--json")
    assert out["model_facts"]["weight_format"] == "mxfp4" and out["verdict"] == "fits"
    assert no_hub == []


def test_a_named_revision_or_an_unbundled_repo_goes_to_the_hub(
    capsys: pytest.CaptureFixture[str], no_hub: list[str]
) -> None:
    for name in (f"{QWEN}@main", "acme/not-bundled"):
        with pytest.raises(AssertionError, match="the Hub was asked"):
            main(["fit", name, "--gpu", "H200"])
    assert no_hub == [f"{QWEN}@main", "acme/not-bundled"]


def _recipe(tmp_path: Path, model: str, extra: str = "") -> Path:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(
        f'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "{model}"\n'
        f'args = ["--max-model-len", "32768"]\n{extra}\n[meta.hardware]\ngpu_model = "H100"\ngpu_count = 4\n'
    )
    return recipe


def test_a_recipe_naming_a_bundled_repo_uses_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, no_hub: list[str]
) -> None:
    rc, out = _run(capsys, str(_recipe(tmp_path, "openai/gpt-oss-120b")), "--json")
    assert rc == 0 and no_hub == []
    assert out["model_source"]["kind"] == "bundled with lair"
    assert out["model_facts"]["name"] == "openai/gpt-oss-120b" and out["context"] == 32768


def test_a_recipe_serving_a_tag_finds_it_by_its_model_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, no_hub: list[str]
) -> None:
    rc, out = _run(capsys, str(_recipe(tmp_path, "llama3.3:70b")), "--json")
    assert rc == 0 and no_hub == []
    assert out["model_facts"]["name"] == "meta-llama/Llama-3.3-70B-Instruct"
