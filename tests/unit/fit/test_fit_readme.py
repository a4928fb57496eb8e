"""The README's own ``lair fit`` lines, run exactly as written on every bundled example, and the
offload modelling they rely on (expert offload with a GPU expert cache, SSD, --cpu-offload-gb)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fit_configs import LLAMA_3_1_8B

REPO = Path(__file__).resolve().parents[3]
GIB = 1 << 30


def _readme_fit_lines() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    return [
        ln.strip() for b in blocks for ln in b.splitlines() if ln.strip().startswith("lair fit examples/")
    ]


def _lair(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "lair", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )


def test_the_readme_covers_every_bundled_example() -> None:
    named = {shlex.split(line)[2] for line in _readme_fit_lines()}
    bundled = {str(p.relative_to(REPO)) for p in (REPO / "examples").glob("*/recipe.toml")}
    assert bundled and named == bundled


def _gib(n: float) -> str:
    return f"{n / GIB:,.1f} GiB"


def _check_consistent(text: str, doc: dict[str, Any]) -> None:
    """Every figure the text prints is the JSON's, labelled per GPU or total; before/after offload add up."""
    gpus = doc["gpus_needed"]
    moved = doc["offload_bytes"] + doc["ssd_offload_bytes"]
    before = doc["before_offload"]
    assert before["weights_bytes_per_gpu"] - doc["weights_bytes_per_gpu"] == pytest.approx(
        moved / gpus, abs=gpus
    )
    assert doc["kv_budget_bytes_per_gpu"] - before["kv_budget_bytes_per_gpu"] == pytest.approx(
        moved / gpus, abs=gpus
    )
    per_gpu = next(ln for ln in text.splitlines() if ln.strip().startswith("per GPU"))
    assert f"weights {_gib(doc['weights_bytes_per_gpu'])}" in per_gpu
    assert (
        f"KV budget {_gib(doc['kv_budget_bytes_per_gpu'])} of {_gib(doc['budget_bytes_per_gpu'])}" in per_gpu
    )
    assert ("(after offload)" in per_gpu) == bool(moved)
    if moved:
        assert f"offload (total, all GPUs): {_gib(doc['offload_bytes'])} of weights in host RAM" in text
        assert f"per GPU after the move: weights {doc['weights_bytes_per_gpu'] / GIB:,.2f} GiB" in text
        assert f"KV budget {doc['kv_budget_bytes_per_gpu'] / GIB:,.2f} GiB" in text
    assert f"{doc['kv_bytes_per_token']:,.0f} B/token whole model" in text
    assert f"{doc['kv_bytes_per_token_per_gpu']:,.0f} B/token per GPU" in text


@pytest.mark.parametrize("line", _readme_fit_lines())
def test_readme_fit_line_runs_on_the_bundled_example(line: str) -> None:
    argv = shlex.split(line)[1:]
    proc = _lair(argv)
    assert proc.returncode == 0, proc.stderr
    as_json = argv if "--json" in argv else [*argv, "--json"]
    doc = json.loads(_lair(as_json).stdout if as_json is not argv else proc.stdout)
    assert doc["verdict"] in ("fits", "fits-with-offload")
    text = proc.stdout if "--json" not in argv else _lair([a for a in argv if a != "--json"]).stdout
    assert text.splitlines()[0].endswith(doc["verdict"].upper())
    _check_consistent(text, doc)


def test_seed_000_on_its_own_rig_fits_with_expert_offload() -> None:
    """2x RTX PRO 6000 with 128 GB host RAM (meta.hardware), fit/layout.toml's FP4 KV, DSpark k=5,
    736 expert-cache slots per GPU and 111 GB of Engram tables on SSD."""
    proc = _lair(["fit", "examples/dsv41-1017-engram-ssd/recipe.toml", "--json"])
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["verdict"] == "fits-with-offload"
    lay, facts = doc["layout"], doc["model_facts"]
    assert (lay["expert_offload"], lay["expert_cache_slots"], lay["kv_cache_dtype"]) == (True, 736, "fp4")
    slot = facts["expert_bytes"] // (facts["n_experts"] * facts["moe_layers"])
    assert doc["expert_cache_bytes_per_gpu"] == 736 * slot
    assert doc["host_ram_needed_bytes"] <= 128 * GIB and doc["kv_pool_tokens"] >= 1_048_576
    assert doc["disk_needed_bytes"] == facts["weight_bytes"] + 111 * 10**9
    assert doc["offload_bytes"] <= facts["expert_bytes"]  # only routed experts left the GPUs


def test_too_little_host_ram_goes_on_to_ssd_or_does_not_fit() -> None:
    base = ["fit", "examples/dsv41-1017-engram-ssd/recipe.toml", "--host-ram-gb", "32", "--json"]
    no_ssd = json.loads(_lair(base).stdout)
    assert no_ssd["verdict"] == "does-not-fit" and any("host RAM 32.00 GiB <" in r for r in no_ssd["reasons"])
    ssd = json.loads(_lair([*base, "--ssd-offload"]).stdout)
    assert ssd["verdict"] == "fits-with-offload"
    assert ssd["host_ram_needed_bytes"] == 32 * GIB
    assert ssd["offload_bytes"] + ssd["ssd_offload_bytes"] == no_ssd["host_ram_needed_bytes"]


def test_cpu_offload_gb_moves_weights_per_gpu(tmp_path: Path) -> None:
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA_3_1_8B))
    base = ["fit", "--model", str(model), "--gpu", "RTX 4090", "--tp", "2", "--gpus", "2", "--json"]
    plain, off = json.loads(_lair(base).stdout), json.loads(_lair([*base, "--cpu-offload-gb", "3"]).stdout)
    assert plain["weights_bytes_per_gpu"] - off["weights_bytes_per_gpu"] == 3 * GIB
    assert off["host_ram_needed_bytes"] == 2 * 3 * GIB and off["verdict"] == "fits-with-offload"


def test_no_model_facts_names_the_command_that_works(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(
        'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "org/not-here"\n'
        '[meta]\nmodel_repo = "org/not-here-either"\n'
    )
    proc = _lair(["fit", str(recipe), "--gpu", "H200"], HF_HUB_CACHE=str(tmp_path / "empty-hub"))
    assert proc.returncode == 1
    assert "org/not-here / org/not-here-either in the local Hugging Face cache" in proc.stderr
    assert "hf download org/not-here --include config.json" in proc.stderr
    assert f"lair fit {recipe} --model DIR" in proc.stderr


def test_a_repo_named_by_meta_model_repo_is_found_in_the_cache(tmp_path: Path) -> None:
    snap = tmp_path / "hub" / "models--org--pack" / "snapshots" / "r1"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(LLAMA_3_1_8B))
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(
        'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "{PACK}"\n'
        '[placeholders.PACK]\ntype = "path"\n[meta]\nmodel_repo = "org/pack"\n'
    )
    proc = _lair(["fit", str(recipe), "--gpu", "H200", "--json"], HF_HUB_CACHE=str(tmp_path / "hub"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["weights_bytes_per_gpu"] == 16_060_522_496
