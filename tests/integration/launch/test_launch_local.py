"""On this machine, through the real ``lair`` command: the bundled tiny-cpu example (native) and a
one-node Docker recipe whose model comes from a Hugging Face hub layout staged per file."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from launch_helpers import (
    assert_clean,
    free_port,
    hub_repo,
    lair,
    local_containers,
    run_record,
    write_recipe,
)

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "examples" / "tiny-cpu" / "recipe.toml"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str) -> dict[str, object]:
    with OPENER.open(url, timeout=10) as resp:
        data: dict[str, object] = json.loads(resp.read())
        return data


def test_tiny_cpu_example_detach_status_logs_stop(lair_home: Path) -> None:
    res = lair("launch", str(TINY), "--detach", "--json", timeout=120)
    assert res.returncode == 0, res.stderr
    run = json.loads(res.stdout)
    run_id = run["run_id"]
    try:
        assert run["endpoint"] == "http://127.0.0.1:8091/v1" and run["state"] == "running"
        models = _get("http://127.0.0.1:8091/v1/models")
        assert models["data"][0]["id"] == "tiny"  # type: ignore[index]
        status = json.loads(lair("status", run_id, "--json", check=True).stdout)
        assert status[0]["state"] == "running" and status[0]["nodes"][0]["alive"] is True
        assert "listening" in lair("logs", run_id, check=True).stdout
        pid = run_record(lair_home, run_id)["nodes"][0]["pid"]
        env_file = Path(f"/tmp/lair-{run_id}-r0/env")
        assert oct(env_file.stat().st_mode & 0o777) == "0o600"
        assert pid and Path(f"/proc/{pid}").exists()
    finally:
        stop = lair("stop", run_id, timeout=60)
    assert stop.returncode == 0 and "checked: no container or process left" in stop.stderr
    assert_clean(lair_home, run_id)


HUB_RECIPE = """
engine = "custom"
docker_image = "{image}"
name = "hub-staged model in docker"
port = {port}
host = "127.0.0.1"
ready_timeout_s = 60
memory_limit = "512m"
entrypoint = ["sh", "-c", '{script}']

[[extra_mounts]]
host = "{repo}"
container = "/model"
read_only = true
"""
SERVE = (
    "test -f /model/sub/tiny-llama.gguf && test ! -L /model/sub/tiny-llama.gguf && "
    "exec python3 -m lair.engines.xllamacpp_server --model /model/sub/tiny-llama.gguf --host 127.0.0.1 "
    "--port $LAIR_ENGINE_PORT"
)


@pytest.mark.docker
def test_docker_hub_staging_serves_regular_files(
    engine_image: str, tiny_model: Path, lair_home: Path, tmp_path: Path
) -> None:
    port = free_port()
    repo = hub_repo(tmp_path, tiny_model)
    text = HUB_RECIPE.format(image=engine_image, port=port, script=SERVE, repo=repo)
    recipe = write_recipe(tmp_path / "recipe.toml", text)
    res = lair("launch", recipe, "--detach", timeout=120)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    try:
        assert _get(f"http://127.0.0.1:{port}/v1/models")["data"]
        inspect = subprocess.run(["docker", "inspect", f"lair-{run_id}-r0"], capture_output=True, text=True)
        mounts = json.loads(inspect.stdout)[0]["Mounts"]
        assert [(m["Source"], m["Destination"], m["RW"]) for m in mounts] == [
            (str(repo / "blobs" / "sha256-gguf"), "/model/sub/tiny-llama.gguf", False)
        ]
    finally:
        stop = lair("stop", run_id, timeout=60)
    assert stop.returncode == 0, stop.stderr
    assert local_containers(run_id) == ""
    assert_clean(lair_home, run_id)


@pytest.mark.docker
def test_docker_engine_exit_fails_with_its_log_and_removes_the_container(
    engine_image: str, lair_home: Path, tmp_path: Path
) -> None:
    text = HUB_RECIPE.split("[[extra_mounts]]")[0].format(
        image=engine_image, port=free_port(), script="echo container-boom >&2; exit 5", repo=""
    )
    before = set(os.listdir(lair_home / "runs")) if (lair_home / "runs").exists() else set()
    res = lair("launch", write_recipe(tmp_path / "r.toml", text), timeout=120)
    assert res.returncode == 1
    assert "container exited with code 5 during start-up" in res.stderr and "container-boom" in res.stderr
    (run_id,) = set(os.listdir(lair_home / "runs")) - before
    assert local_containers(run_id) == "" and run_record(lair_home, run_id)["state"] == "failed"
    assert_clean(lair_home, run_id)


def test_launch_bench_writes_a_report_then_stops(lair_home: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "tiny-cpu" / "recipe.toml"  # the report folder goes beside the recipe
    recipe.parent.mkdir()
    shutil.copyfile(TINY, recipe)
    args = ["--bench", "--bench-contexts", "64,32", "--bench-decode-tokens", "8", "--bench-repeat", "1"]
    args += ["--bench-order", "fixed", "--bench-idle-gap", "0.5", "--bench-telemetry", "none"]
    tokenizer = "/tmp/lair-tiny-cpu-model/hf/tokenizer.json"  # built by the example's hook (MODEL_DIR)
    res = lair("launch", str(recipe), *args, "--bench-tokenizer", tokenizer, "--json", timeout=180)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert [c["context"] for c in out["bench"]["cells"]] == [64, 32] and out["state"] == "stopped"
    report = Path(out["report"])
    assert report.parent == recipe.parent / "reports" and (report / "results.json").exists()
    assert "listening" in "".join(p.read_text() for p in report.rglob("*.log"))
    bench = json.loads((report / "results.json").read_text())["bench"]
    cert = bench["certificate"]  # the options chosen on the launch's command line, as the report has them
    assert (cert["order"], cert["seed"], cert["cells_in_order"]) == ("fixed", None, [[64, 1], [32, 1]])
    assert cert["idle_gap_s"] == 0.5 and cert["telemetry"] == "none"
    assert "telemetry turned off" in cert["telemetry_note"]
    ran = {c["context"]: c["certificate"] for c in bench["cells"]}
    assert (ran[64]["position"], ran[32]["position"]) == (0, 1)
    assert all(c["idle_gap_s"] >= 0.5 and c["gpu"] is None for c in ran.values())
    assert "fixed order: 64x1 -> 32x1" in (report / "report.md").read_text()
    assert_clean(lair_home, out["run_id"])


HOOKS = """
engine = "custom"
runtime = "native"
name = "hooks on this machine"
port = {port}
ready_timeout_s = 30
entrypoint = ["python3", "-m", "http.server", "--bind", "127.0.0.1", "{port}"]
health_path = "/"
before_serve = [{{ script = "lair_test_note", args = ["{out}", "two words"] }}, {before}]
after_stop = [{{ run = "touch {out}/after-stop" }}]
"""


def test_user_library_script_with_args_then_a_hook_timeout(lair_home: Path, tmp_path: Path) -> None:
    scripts = lair_home / "scripts"
    scripts.mkdir(exist_ok=True)
    (scripts / "lair_test_note.sh").write_text(
        '#!/bin/sh\nprintf "%s|%s|%s\\n" "$2" "$LAIR_NODE_RANK" "$0" > "$1/note"\n'
    )
    port = free_port()
    slow = '{ run = "sleep 30", timeout_s = 1 }'
    recipe = write_recipe(tmp_path / "r.toml", HOOKS.format(port=port, out=tmp_path, before=slow))
    res = lair("launch", recipe, timeout=60)
    assert res.returncode == 1 and "timed out after 1 s" in res.stderr, res.stderr
    words, rank, path = (tmp_path / "note").read_text().strip().split("|")
    assert (words, rank) == ("two words", "0") and path.endswith("/hooks/before_serve-0-lair_test_note.sh")
    assert (tmp_path / "after-stop").exists()
    run_id = re.findall(r"\] run (\S+) on ", res.stderr)[0]
    assert_clean(lair_home, run_id)


def test_launch_bench_and_eval_on_one_launch(lair_home: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "tiny-cpu" / "recipe.toml"
    recipe.parent.mkdir()
    shutil.copyfile(TINY, recipe)
    args = ["--bench", "--bench-contexts", "64", "--bench-decode-tokens", "8", "--bench-repeat", "1"]
    args += ["--bench-tokenizer", "/tmp/lair-tiny-cpu-model/hf/tokenizer.json"]
    args += ["--eval", "lair_arith", "--eval-limit", "6", "--eval-repeat", "2"]
    res = lair("launch", str(recipe), *args, "--json", timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    (cell,) = out["bench"]["cells"]
    (suite,) = out["eval"]["suites"]
    assert cell["context"] == 64 and suite["suite"] == "lair_arith" and suite["n"] == 6
    assert out["eval"]["model"] == "tiny" and out["state"] == "stopped"
    report = Path(out["report"])
    doc = json.loads((report / "results.json").read_text())
    assert doc["bench"]["cells"][0]["context"] == 64 and doc["eval"]["suites"][0]["repeats"] == 2
    samples = (report / "eval_samples.jsonl").read_text().splitlines()
    assert len(samples) == 12
    html = (report / "report.html").read_text()
    assert "<table class='quality'>" in html and "lair_arith" in html
    assert_clean(lair_home, out["run_id"])
