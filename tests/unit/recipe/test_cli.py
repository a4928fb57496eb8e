"""The recipe CLI contract: exit codes and --json models other tools rely on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lair.cli import main

ROOT = Path(__file__).resolve().parents[3]
LAUNCHER = ROOT / "examples" / "dsv41-flash-exl3-2x" / "recipe.toml"
MALFORMED = ROOT / "tests" / "data" / "malformed"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_check_json_valid(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "check", str(LAUNCHER), "--json")
    data = json.loads(out)
    assert rc == 0 and data["ok"] is True and data["errors"] == []
    assert set(data["warnings"][0]) >= {"file", "line", "col", "path", "message", "hint"}


def test_check_json_invalid(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "check", str(LAUNCHER), str(MALFORMED / "03_port_string.toml"), "--json")
    data = json.loads(out)
    assert rc == 1 and data["ok"] is False
    e = data["errors"][0]
    assert (e["line"], e["col"], e["path"]) == (3, 8, "port")
    assert e["file"].endswith("03_port_string.toml") and e["message"].startswith("expected an integer")


def test_check_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "check", str(MALFORMED / "01_typo_top_key.toml"))
    assert rc == 1
    assert "01_typo_top_key.toml:3:1: tensor_paralel_size: unknown key" in err
    assert "hint: did you mean 'tensor_parallel_size'?" in err
    # the lint runs in the same pass: image tag '1' has no digest
    assert out.strip().endswith("1 error(s), 1 warning(s)")
    assert "01_typo_top_key.toml:2:16: docker_image: image tag '1' is not pinned by digest" in err


def test_show_json_is_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "show", str(LAUNCHER), "--json")
    data = json.loads(out)
    assert rc == 0 and data["engine"] == "vllm" and data["cpus"] == 6.0 and data["meta"]["performance"] == []


def test_show_human_in_page_order(capsys: pytest.CaptureFixture[str]) -> None:
    page = ROOT / "examples" / "dsv41-1017-engram-ssd" / "recipe.toml"
    rc, out, _ = run(capsys, "show", str(page))
    order = [
        "Launch command",
        "env",
        "flags",
        "notes",
        "Engine",
        "Hardware",
        "Context",
        "KV pool",
        "Speed by context",
    ]
    positions = [out.index("\n" + h + "\n") for h in order]
    assert rc == 0 and positions == sorted(positions)
    assert (
        "1,071,558 tokens" in out and "change-me" in out
    )  # the page's own launch command is shown as published


def test_show_hides_secret_env_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "s.toml"
    p.write_text('engine = "vllm"\ndocker_image = "a/b:1"\n[env]\nHF_TOKEN = "hf_secret_value"\n')
    rc, out, _ = run(capsys, "show", str(p), "--json")
    assert rc == 0 and "hf_secret_value" not in out and json.loads(out)["env"]["HF_TOKEN"] == "***"


@pytest.mark.parametrize("fmt", ["yaml", "json", "toml"])
def test_export_and_import_back(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / f"r.{fmt}"
    rc, _, _ = run(capsys, "export", str(LAUNCHER), "--format", fmt, "-o", str(out_file))
    assert rc == 0
    rc, out, _ = run(capsys, "check", str(out_file), "--json")
    assert rc == 0 and json.loads(out)["ok"] is True
    if fmt == "toml":
        assert out_file.read_bytes() == LAUNCHER.read_bytes()


def test_schema_is_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "schema")
    schema = json.loads(out)
    assert rc == 0 and schema["type"] == "object" and schema["additionalProperties"] is False
    assert "tensor_parallel_size" in schema["properties"] and "Meta" in schema["$defs"]


def test_new_scaffold_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "n.toml"
    assert run(capsys, "new", str(target), "--nodes", "2", "--tp", "2")[0] == 0
    assert run(capsys, "check", str(target))[0] == 0
    rc, _, err = run(capsys, "new", str(target))
    assert rc == 1 and "exists" in err


def test_set_and_rig_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "n.toml"
    run(capsys, "new", str(target))
    assert run(capsys, "set", str(target), "port=9001")[0] == 0
    assert "port = 9001" in target.read_text()
    rc, _, err = run(capsys, "set", str(target), "port=0")
    assert rc == 1 and "port: must be >= 1" in err
    assert run(capsys, "rig", "set", "lab", "MODEL_DIR=/m", "--hardware", "gpu_count=2")[0] == 0
    rc, out, _ = run(capsys, "rig", "show", "lab", "--json")
    assert json.loads(out)["values"] == {"MODEL_DIR": "/m"} and json.loads(out)["hardware"]["gpu_count"] == 2
    rc, out, _ = run(capsys, "rig", "list", "--json")
    assert json.loads(out) == {"rigs": ["lab"]}


def test_scripts_lists_builtins(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "scripts", "--json")
    assert rc == 0 and {"unlock_display_ram", "restore_display_ram", "make_tiny_model"} <= set(
        json.loads(out)
    )


def _check_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> tuple[int, list[dict[str, str]]]:
    f = tmp_path / "recipe.toml"
    f.write_text(text)
    rc, out, _ = run(capsys, "check", str(f), "--json")
    return rc, json.loads(out)["errors"]


def test_check_kv_cache_dtype_names_per_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = 'docker_image = "i:1"\nmodel = "m"\n'
    rc, errors = _check_one(tmp_path, capsys, f'engine = "sglang"\n{head}kv_cache_dtype = "fp8"\n')
    assert rc == 1 and [(e["line"], e["path"], e["code"]) for e in errors] == [
        (4, "kv_cache_dtype", "kv-cache-dtype")
    ]
    assert "'fp8_e4m3' or 'fp8_e5m2'" in errors[0]["hint"]
    assert _check_one(tmp_path, capsys, f'engine = "vllm"\n{head}kv_cache_dtype = "fp8"\n') == (0, [])
    rc, errors = _check_one(tmp_path, capsys, f'engine = "vllm"\n{head}args = ["--kv-cache-dtype", "fp9"]\n')
    assert rc == 1 and errors[0]["path"] == "args[1]" and "vllm does not accept" in errors[0]["message"]


def test_check_refuses_ray_for_sglang(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (
        'engine = "sglang"\ndocker_image = "i:1"\nmodel = "m"\nrequired_nodes = 2\n'
        'tensor_parallel_size = 2\ndistributed_backend = "ray"\n'
    )
    rc, errors = _check_one(tmp_path, capsys, text)
    assert rc == 1 and [(e["line"], e["code"]) for e in errors] == [(6, "ray-unsupported")]
    assert _check_one(tmp_path, capsys, text.replace('"ray"', '"mp"')) == (0, [])
