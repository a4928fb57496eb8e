"""``lair fit`` end to end through the real CLI entry (recipes, model folders, rigs, seeds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fit_configs import LLAMA_3_1_8B

from lair.cli import main
from lair.rig import set_rig_values

REPO = Path(__file__).resolve().parents[3]
DSV41 = REPO / "tests" / "data" / "fit" / "dsv41-flash-representative"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    rc = main(["fit", *argv])
    out = capsys.readouterr().out
    return rc, json.loads(out) if "--json" in argv else out


@pytest.fixture
def llama_dir(tmp_path: Path) -> Path:
    d = tmp_path / "llama-3.1-8b"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA_3_1_8B))
    return d


def test_model_folder_on_a_catalog_gpu(capsys: pytest.CaptureFixture[str], llama_dir: Path) -> None:
    rc, out = _run(capsys, "--model", str(llama_dir), "--gpu", "H200", "--json")
    assert rc == 0
    assert out["verdict"] == "fits"
    assert out["weights_bytes_per_gpu"] == 16_060_522_496
    assert out["kv_bytes_per_token"] == 131_072
    assert out["kv_pool_tokens"] == 899_390
    assert out["max_context"] == 131_072
    # at the model's own 131,072 tokens: (15,009,849,344 + 131,072 x 131,072) B / 4.8e12 B/s
    assert out["decode_roofline_tok_s"] == round(4.8e12 / (15_009_849_344 + 131_072**2), 1)  # 149.1
    assert out["hardware"]["sources"][0]["url"].startswith("https://")


def test_model_folder_as_the_file_with_kv_dtype_and_context(
    capsys: pytest.CaptureFixture[str], llama_dir: Path
) -> None:
    rc, out = _run(
        capsys, str(llama_dir), "--gpu", "RTX 4090", "--kv-dtype", "fp8", "--context", "8192", "--json"
    )
    assert rc == 0
    assert out["kv_bytes_per_token"] == 65_536
    assert out["context"] == 8192
    assert out["kv_needed_bytes_per_gpu"] == 65_536 * 8192


def test_recipe_args_set_the_layout(
    capsys: pytest.CaptureFixture[str], llama_dir: Path, tmp_path: Path
) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(
        'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\n'
        f'model = "{llama_dir}"\ntensor_parallel_size = 2\n'
        'args = ["--gpu-memory-utilization", "0.8", "--kv-cache-dtype", "fp8", "--max-model-len", "65536"]\n'
    )
    rc, out = _run(capsys, str(recipe), "--gpu", "rtx-pro-6000", "--json")
    assert rc == 0
    assert out["layout"]["tp"] == 2 and out["gpus_available"] == 2
    assert out["budget_bytes_per_gpu"] == int(0.8 * 96 * 2**30)  # 82,463,372,083
    assert out["weights_bytes_per_gpu"] == 16_060_522_496 // 2
    assert out["kv_bytes_per_token_per_gpu"] == 2 * 4 * 128 * 1 * 32  # 4 KV heads per GPU, fp8
    assert out["context"] == 65_536


def test_rig_hardware(capsys: pytest.CaptureFixture[str], llama_dir: Path) -> None:
    set_rig_values("box", {"gpu_model": "H100", "gpu_count": "1", "host_ram_gb": "64"}, section="hardware")
    rc, out = _run(capsys, "--model", str(llama_dir), "--rig", "box", "--json")
    assert rc == 0
    assert out["hardware"]["device"] == "h100-sxm"
    assert out["hardware"]["host_ram_bytes"] == 64 * 2**30


def test_does_not_fit_exits_1(capsys: pytest.CaptureFixture[str], llama_dir: Path) -> None:
    rc, out = _run(capsys, "--model", str(llama_dir), "--gpu", "DGX Spark", "--concurrency", "64", "--json")
    assert rc == 1
    assert out["verdict"] == "does-not-fit"


def test_errors_are_json_envelopes(capsys: pytest.CaptureFixture[str], llama_dir: Path) -> None:
    rc = main(["fit", "--model", str(llama_dir), "--gpu", "A100", "--json"])
    captured = capsys.readouterr()
    assert rc == 1
    body = json.loads(captured.out)
    assert body["ok"] is False and body["error"]["code"] == "fit"
    assert "did you mean" in captured.err
    rc = main(["fit", "--model", str(llama_dir)])
    assert rc == 1
    assert "no hardware to fit on" in capsys.readouterr().err


def test_text_output(capsys: pytest.CaptureFixture[str], llama_dir: Path) -> None:
    rc, text = _run(
        capsys, "--model", str(llama_dir), "--gpu", "H200", "--context", "1024", "--concurrency", "4"
    )
    assert rc == 0
    assert text.splitlines()[0] == "llama-3.1-8b on 1 x NVIDIA H200 SXM: FITS"
    assert "decode 317.0 tok/s per stream" in text
    assert "aggregate at 4" in text


def test_list_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "--list-gpus", "--json"]) == 0
    devices = json.loads(capsys.readouterr().out)
    assert {"rtx-pro-6000", "h200", "dgx-spark"} <= {d["id"] for d in devices}
    assert all(d["sources"] for d in devices)


def test_seed_recipe_page_engram_ssd(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 000: 2x RTX PRO 6000 (meta.hardware), 1M context, DSpark k=5, FP4 KV (see docs/fit.md)."""
    recipe = REPO / "examples" / "dsv41-1017-engram-ssd" / "recipe.toml"
    rc, out = _run(
        capsys, str(recipe), "--model", str(DSV41), "--kv-dtype", "fp4", "--spec-tokens", "5",
        "--gpu-memory-utilization", "0.94", "--json",
    )  # fmt: skip
    assert rc == 0
    assert out["hardware"]["gpus"] == 2 and out["hardware"]["device"] == "rtx-pro-6000"
    assert out["context"] == 1_048_576  # meta.max_context is not a launch setting: the model's limit is used
    assert out["verdict"] == "fits-with-offload"
    assert 60 * 2**30 < out["offload_bytes"] < 100 * 2**30  # the page runs ~82 GiB of host RAM
    assert out["kv_pool_tokens"] >= 1_048_576
    rows = out["measured"]
    assert [r["context"] for r in rows] == [2048, 40960, 46080, 46080]
    assert not any(r["implausible"] for r in rows)
    assert all(r["decode_pct"] is None or r["decode_pct"] < 100 for r in rows)


def test_seed_launcher_recipe_on_two_sparks(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 003: TP2 over two DGX Spark, GMU 0.92 and 1M context from DS41_* env names."""
    recipe = REPO / "examples" / "dsv41-flash-exl3-2x" / "recipe.toml"
    rc, out = _run(
        capsys, str(recipe), "--model", str(DSV41), "--gpu", "DGX Spark", "--gpus", "2",
        "--kv-dtype", "fp4", "--dcp", "2", "--spec-tokens", "3", "--json",
    )  # fmt: skip
    assert rc == 0
    assert out["layout"]["gpu_memory_utilization"] == 0.92
    assert out["layout"]["max_model_len"] == 1_048_576
    assert out["verdict"] == "fits"
    assert out["hardware"]["link_gbs_per_direction"] == 25.0  # 200 Gb/s RoCE between the two units


def test_cli_module_imports_nothing_heavy() -> None:
    heavy = "('lair.fit', 'pydantic', 'gguf')"
    code = f"import sys, lair.cli.fit_cmds; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_recipe_rows_rated_and_hf_cache_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recipe naming a Hugging Face repo finds it in the local cache; its speed rows are rated."""
    entry = tmp_path / "hub" / "models--meta-llama--Llama-3.1-8B"
    snap = entry / "snapshots" / "rev1"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(LLAMA_3_1_8B))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(
        'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nmodel = "meta-llama/Llama-3.1-8B"\n'
        'args = ["--max-model-len", "8192"]\n\n[meta.hardware]\ngpu_model = "H200"\ngpu_count = 1\n\n'
        "[[meta.performance]]\ncontext = 1024\ndecode_tok_s = 180.0\nprefill_tok_s = 20000.0\n\n"
        "[[meta.performance]]\ncontext = 1024\ndecode_tok_s = 400.0\n"
    )
    rc, out = _run(capsys, str(recipe), "--json")
    assert rc == 0
    assert out["model"] == "meta-llama/Llama-3.1-8B"
    assert out["context"] == 8192
    ok, bad = out["measured"]
    # ceiling at 1024 tokens on an H200: 316.96 tok/s (see test_fit_architectures)
    assert (ok["decode_pct"], ok["implausible"]) == (56.8, False)
    assert (bad["decode_pct"], bad["implausible"]) == (126.2, True)
    rc, text = _run(capsys, str(recipe))
    assert "IMPLAUSIBLE (decode 400.0 tok/s > ceiling 317.0)" in text
