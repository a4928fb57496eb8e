"""``lair import sparkrun|vllm-recipes`` and ``lair export --format sparkrun|vllm-recipe``: each sample
imports, checks and plans; field-by-field expectations written from the sample files; the unmapped
fields; round trips; exports accepted by sparkrun's own loader (its PyPI package, in the cached venv
of ``scripts/engines-setup.sh sparkrun``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from lair.cli import main
from lair.errors import InteropError
from lair.interop import export_recipe, import_recipes
from lair.interop.conversion import MAX_FILE_BYTES
from lair.recipe import load_text
from lair.testing.engines import sparkrun_venv

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "interop"
SPARK_FIXTURE = ROOT / "benchmarks" / "data" / "dsv41-flash-exl3-2x.yaml"
SPARK_PARSE = Path(__file__).with_name("sparkrun_parse.py")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def sparkrun_parse(*files: Path) -> list[dict[str, Any]]:
    """What sparkrun's own ``Recipe.load`` and ``validate_recipe`` make of the files."""
    py = sparkrun_venv() / "bin" / "python"
    res = subprocess.run(
        [str(py), str(SPARK_PARSE), *map(str, files)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    parsed: list[dict[str, Any]] = json.loads(res.stdout)
    return parsed


def one(fmt: str, path: Path) -> dict[str, Any]:
    (imp,) = import_recipes(fmt, path)
    return imp.data


# ---- sparkrun -> lair ----------------------------------------------------------------------


def test_the_hand_translated_fixture_imports_field_by_field() -> None:
    source = yaml.safe_load(SPARK_FIXTURE.read_text())  # the file's own values, for env
    (imp,) = import_recipes("sparkrun", SPARK_FIXTURE)
    d = imp.data
    assert imp.name == "dsv41-flash-exl3-2x" and d["meta"]["slug"] == "dsv41-flash-exl3-2x"
    assert d["engine"] == "vllm" and d["distributed_backend"] == "mp" and d["required_nodes"] == 2
    assert d["docker_image"] == "ghcr.io/coolbho3k/deepseek-v4.1-flash-exl3-3bpw-2x-dgx-spark:20260917-rc2"
    assert d["model"] == "coolbho3k/DeepSeek-V4.1-Flash-EXL3-3bpw"
    assert d["name"] == "DeepSeek-V4.1-Flash EXL3 3bpw (2x Spark, TP2/DCP2, DSpark K=3, 1M)"
    assert (d["tensor_parallel_size"], d["pipeline_parallel_size"]) == (2, 1)
    assert d["served_model_name"] == "deepseek-v41-flash-exl3"
    assert (d["gpu_memory_utilization"], d["max_model_len"]) == (0.92, 1048576)
    assert (d["shm_size"], d["memory_limit"], d["devices"]) == ("2g", "9g", ["/dev/dri/card0"])
    assert d["extra_mounts"][0] == {
        "host": "/mnt/nas/ai/huggingface/hub",
        "container": "/hub",
        "read_only": True,
    }
    assert d["extra_mounts"][3] == {"host": "/home/kilork/exl3-cache", "container": "/cache"}
    assert d["env"] == source["env"] and d["env"]["NCCL_PROTO"] == "^LL128"
    # pre_exec runs in the container before the serve command: the same, in one sh -c
    sh, c, script, zero = d["entrypoint"]
    lines = script.split("\n")
    assert (sh, c, zero, lines[0]) == ("sh", "-c", "sh", "set -e")
    assert lines[1:4] == source["pre_exec"]
    assert lines[4].startswith("exec /opt/ds41-venv/bin/python /opt/ds41-serving/serve.py serve /model ")
    # the command's {served_model_name} and {tensor_parallel} are filled from defaults
    assert "--served-model-name deepseek-v41-flash-exl3 --tensor-parallel-size 2 " in lines[4]
    assert lines[4].endswith('--reasoning-parser deepseek_v41 "$@"')
    assert [u.path for u in imp.unmapped] == ["defaults.max_num_seqs", "defaults.max_num_batched_tokens"]


def test_a_command_less_recipe_gets_engine_flags_and_lists_what_lair_cannot_say() -> None:
    (imp,) = import_recipes("sparkrun", DATA / "sparkrun" / "qwen3-sglang-solo.yaml")
    d = imp.data
    assert (d["engine"], d["model"], d["docker_image"]) == (
        "sglang",
        "Qwen/Qwen3-8B",
        "lmsysorg/sglang:v0.5.23",
    )
    assert "required_nodes" not in d and (d["tensor_parallel_size"], d["port"]) == (1, 30000)
    assert d["args"] == ["--mem-fraction-static", "0.85", "--enable-torch-compile"]
    assert (d["shm_size"], d["ipc"]) == ("16g", "host")
    assert d["extra_mounts"] == [{"host": "/srv/models", "container": "/models"}]
    assert d["env"] == {"SGLANG_LOG_LEVEL": "info"}
    assert d["meta"]["engine"] == {"name": "sglang", "version": "0.5.23"}
    assert (
        d["meta"]["credits"] == [{"who": "alice", "role": "maintainer"}]
        and d["meta"]["quantization"] == "none"
    )
    unmapped = {u.path: u.value for u in imp.unmapped}
    assert sorted(unmapped) == sorted(
        ["pre_exec", "executor_config.restart_policy", "metadata.model_params", "post_exec", "mods"]
    )
    assert unmapped["mods"] == ["tune-kernel"]
    toml = imp.toml()  # the comment block names each, the TOML body carries none
    for path in unmapped:
        assert f"#   {path} = " in toml
    assert "post_exec" not in toml.split("\n# every")[0].split("engine =")[1]


def test_command_templates_fill_from_defaults_and_the_rest_become_placeholders() -> None:
    (imp,) = import_recipes("sparkrun", DATA / "sparkrun" / "llama-template.yaml")
    d = imp.data
    assert d["entrypoint"][:8] == [
        "vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "4",
        "--max-model-len", "32768", "--kv-cache-dtype",
    ]  # fmt: skip
    assert d["entrypoint"][-1] == '{"model": "{draft_dir}", "num_speculative_tokens": 3}'
    assert list(d["placeholders"]) == ["draft_dir"]
    assert (d["privileged"], d["ulimits"], d["kv_cache_dtype"]) == (True, {"memlock": "-1"}, "fp8")
    assert {u.path for u in imp.unmapped} == {"max_nodes", "executor_config.labels"}


@pytest.mark.parametrize(
    ("fmt", "path"),
    [
        ("sparkrun", SPARK_FIXTURE),
        ("sparkrun", DATA / "sparkrun"),
        ("vllm-recipes", DATA / "vllm-recipes"),
    ],
)
def test_each_sample_imports_checks_and_plans(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fmt: str, path: Path
) -> None:
    rc, out, err = run(capsys, "import", fmt, str(path), "-o", str(tmp_path), "--json")
    assert rc == 0, err
    files = [r["file"] for r in json.loads(out)["recipes"]]
    assert files and all(Path(f).is_file() for f in files)
    rc, out, err = run(capsys, "check", *files, "--json")
    assert rc == 0 and json.loads(out)["errors"] == [], out
    for f in files:
        nodes = "a,b" if "required_nodes = 2" in Path(f).read_text() else "a"
        rc, out, err = run(
            capsys, "plan", f, "--nodes", nodes, "--set", "GPUS=8", "--set", "draft_dir=/d", "--json"
        )
        assert rc == 0, (f, err)
        assert json.loads(out)["nodes"]


def test_an_existing_file_is_not_overwritten(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert run(capsys, "import", "sparkrun", str(SPARK_FIXTURE), "-o", str(tmp_path))[0] == 0
    rc, _, err = run(capsys, "import", "sparkrun", str(SPARK_FIXTURE), "-o", str(tmp_path))
    assert rc == 1 and "exists" in err and "--force" in err


def test_budgets_and_bad_files_are_located_errors(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(InteropError, match=f"over the {MAX_FILE_BYTES}-byte budget") as e:
        import_recipes("sparkrun", big)
    assert e.value.file == str(big)
    bad = tmp_path / "bad.yaml"
    bad.write_text("recipe_version: '2'\nmodel: m\nexecutor_config:\n  volumes: ['/only-one-part']\n")
    with pytest.raises(InteropError) as e:
        import_recipes("sparkrun", bad)
    assert e.value.path == "executor_config.volumes[0]"
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(InteropError, match="a recipe is a YAML mapping, not list"):
        import_recipes("vllm-recipes", listed)


# ---- lair -> sparkrun, round trips -----------------------------------------------------------


def test_exports_are_accepted_by_sparkruns_own_loader(tmp_path: Path) -> None:
    files = []
    for imp in import_recipes("sparkrun", DATA / "sparkrun") + import_recipes("sparkrun", SPARK_FIXTURE):
        text, _ = export_recipe(load_text(imp.toml(), imp.name), "sparkrun")
        (tmp_path / f"{imp.name}.yaml").write_text(text)
        files.append(tmp_path / f"{imp.name}.yaml")
    parsed = {p["name"]: p for p in sparkrun_parse(*files)}
    assert all(p["errors"] == [] for p in parsed.values()), parsed
    spark = parsed["dsv41-flash-exl3-2x"]  # sparkrun reads back what the fixture says
    fixture = yaml.safe_load(SPARK_FIXTURE.read_text())
    for key in ("model", "container", "min_nodes", "max_nodes", "env", "pre_exec", "description"):
        assert spark[key] == fixture[key], key
    assert spark["runtime"] == "vllm-distributed" and spark["runtime_config"] == {}
    assert spark["executor_config"] == fixture["executor_config"]
    assert spark["defaults"] == {k: v for k, v in fixture["defaults"].items() if k in spark["defaults"]}
    assert spark["command"].startswith("/opt/ds41-venv/bin/python /opt/ds41-serving/serve.py serve /model")


def _shared(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "meta"} | {
        k: v for k, v in data.get("meta", {}).items() if k in ("credits", "quantization", "engine")
    }


@pytest.mark.parametrize("path", [SPARK_FIXTURE, *sorted((DATA / "sparkrun").glob("*.yaml"))])
def test_sparkrun_round_trip(tmp_path: Path, path: Path) -> None:
    (first,) = import_recipes("sparkrun", path)
    text, lost = export_recipe(load_text(first.toml(), first.name), "sparkrun")
    out = tmp_path / path.name
    out.write_text(text)
    (again,) = import_recipes("sparkrun", out)
    assert _shared(again.data) == _shared(first.data)
    assert [u.path for u in lost] == (["placeholders"] if "placeholders" in first.data else [])


def test_lair_fields_sparkrun_cannot_say_are_listed() -> None:
    recipe = load_text(
        'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.32.0"\nmodel = "m"\ncpus = 4\n'
        'after_stop = ["echo bye"]\n'
        'before_serve = ["echo hi"]\n[meta]\nlicense = "mit"\n',
        "r.toml",
    )
    text, lost = export_recipe(recipe, "sparkrun")
    assert {u.path for u in lost} == {"cpus", "after_stop", "before_serve", "meta.license"}
    assert "cpus" not in yaml.safe_load(text)


# ---- vLLM Recipes ----------------------------------------------------------------------------

ACME = DATA / "vllm-recipes" / "Acme-Coder-30B-A3B.yaml"


def test_each_variant_strategy_and_hardware_override_is_its_own_recipe() -> None:
    ims = {i.name: i.data for i in import_recipes("vllm-recipes", ACME)}
    base = "acme-coder-30b-a3b-"
    assert sorted(ims) == sorted(
        base + s
        for s in (
            "default-single-node-tp", "default-single-node-tp-blackwell", "default-single-node-tep",
            "default-single-node-tep-blackwell", "fp8-single-node-tp", "fp8-single-node-tp-blackwell",
            "fp8-single-node-tep", "fp8-single-node-tep-blackwell",
        )
    )  # fmt: skip
    # the order of resolveCommand: base_args, variant, strategy + parallel size, strategy override,
    # hardware override, default-on features (spec_decoding: its default mode)
    tools = ["--enable-auto-tool-choice", "--tool-call-parser", "acme"]
    mtp = ["--speculative-config", '{"method":"mtp","num_speculative_tokens":2}']
    d = ims[base + "default-single-node-tp-blackwell"]
    assert d["args"] == ["--trust-remote-code", "--attention-backend", "FLASHINFER", *tools, *mtp]
    assert d["tensor_parallel_size"] == 2  # the variant's tp map, default key
    assert (d["model"], d["docker_image"], d["env"]) == (
        "acme/Coder-30B-A3B", "vllm/vllm-openai:latest", {"VLLM_USE_DEEP_GEMM": "1"}
    )  # fmt: skip
    d = ims[base + "fp8-single-node-tep"]
    assert d["args"] == [
        "--trust-remote-code", "--kv-cache-dtype", "fp8", "--enable-expert-parallel",
        "--tensor-parallel-size", "{GPUS}", "--max-num-seqs", "256", *tools, *mtp,
    ]  # fmt: skip
    assert d["model"] == "acme/Coder-30B-A3B-FP8" and d["placeholders"]["GPUS"]["type"] == "int"
    meta = d["meta"]
    assert (meta["title"], meta["quantization"], meta["max_context"]) == ("Acme Coder 30B-A3B", "fp8", 131072)
    assert meta["engine"] == {"name": "vllm", "version": "0.30.0"} and meta["tags"] == ["text", "code"]
    assert (meta["upstream_weights"], meta["model_repo"]) == ("acme/Coder-30B-A3B", "acme/Coder-30B-A3B-FP8")


def test_vllm_recipe_fields_with_no_lair_meaning_are_listed() -> None:
    imp = next(i for i in import_recipes("vllm-recipes", ACME) if i.name.endswith("fp8-single-node-tp"))
    assert [u.path for u in imp.unmapped] == [
        "meta.provider", "meta.date_added", "meta.date_updated", "meta.difficulty", "meta.hardware",
        "model.architecture", "model.parameter_count", "features.long_context",
        "compatible_strategies.multi_node_tp", "variants.fp8.vram_minimum_gb",
    ]  # fmt: skip
    assert "#   features.long_context = " in imp.toml()


def test_vllm_recipe_round_trip(tmp_path: Path) -> None:
    for first in import_recipes("vllm-recipes", ACME):
        if "{GPUS}" in first.data["args"]:
            continue  # the site sizes it by the GPU count: an export names a size
        text, lost = export_recipe(load_text(first.toml(), first.name), "vllm-recipe")
        out = tmp_path / "Acme.yaml"
        out.write_text(text)
        again = import_recipes("vllm-recipes", out)
        assert len(again) == 1 and lost == []
        a, b = again[0].data, first.data
        for key in ("engine", "docker_image", "model", "args", "tensor_parallel_size", "env"):
            assert a.get(key) == b.get(key), key
        for key in ("title", "summary", "tags", "upstream_weights", "quantization", "max_context", "engine"):
            assert a["meta"].get(key) == b["meta"].get(key), key
