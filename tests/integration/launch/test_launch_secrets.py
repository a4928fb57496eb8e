"""Secrets end to end: an API key from the environment (``args = ["--api-key", "{API_KEY}"]``) and a
token from a rig (``env.HF_TOKEN = "{HF_TOKEN}"``) never show in the plan (text and JSON), the
journal, the engine's log, ``ps`` on the node, ``docker inspect`` or the report folder. The engine
(llama.cpp's server) really enforces the key: readiness and the benchmark authenticate with it, a
request without it gets 401.

Docker on an SSH netns node with its own dockerd, and a native run on this machine with ``--bench``.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from launch_helpers import assert_clean, free_port, lair, runs_dir, write_recipe

from lair.testing.nodes import NetnsNodes

pytestmark = [pytest.mark.integration]

API_KEY = "sk-lair-test-5d1e2c9b7a"
HF_TOKEN = "hf_lairtesttoken_82c4f1"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

TOP = """
engine = "xllamacpp"
served_model_name = "tiny"
port = {port}
ready_timeout_s = 90
args = ["--api-key", "{{API_KEY}}"]
"""
TABLES = """
[env]
HF_TOKEN = "{{HF_TOKEN}}"
PLAIN = "visible"

[placeholders.API_KEY]
type = "secret"
[placeholders.HF_TOKEN]
type = "secret"
"""
DOCKER = (
    TOP
    + """
runtime = "docker"
docker_image = "{image}"
cluster = "test-docker-nodes"
entrypoint = ["python3", "-m", "lair.engines.xllamacpp_server", "--model", "/model/tiny-llama.gguf",
  "--alias", "tiny", "--threads", "1", "--parallel", "1"]
[[extra_mounts]]
host = "{model_dir}"
container = "/model"
read_only = true
"""
    + TABLES
)
NATIVE = (
    TOP
    + """
runtime = "native"
host = "127.0.0.1"
entrypoint = ["python3", "-m", "lair.engines.xllamacpp_server", "--model", "{gguf}",
  "--alias", "tiny", "--threads", "1", "--parallel", "1", "--ctx", "1024"]
"""
    + TABLES
)


def _status(url: str, key: str | None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with OPENER.open(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _hits(text: str) -> list[str]:
    return [s for s in (API_KEY, HF_TOKEN) if s in text]


def _folder_hits(folder: Path) -> dict[str, list[str]]:
    out = {}
    for p in folder.rglob("*"):
        if p.is_file() and (h := _hits(p.read_bytes().decode(errors="replace"))):
            out[str(p)] = h
    return out


def _rig(name: str) -> str:
    from lair.rig import set_rig_values

    set_rig_values(name, {"HF_TOKEN": HF_TOKEN})
    return name


@pytest.mark.docker
@pytest.mark.ssh
def test_secrets_stay_out_of_everything_on_a_docker_ssh_node(
    ssh_nodes_docker: NetnsNodes,
    engine_image_on_nodes: str,
    tiny_model: Path,
    lair_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("API_KEY", API_KEY)
    port = free_port()
    text = DOCKER.format(image=engine_image_on_nodes, model_dir=tiny_model.parent, port=port)
    recipe = write_recipe(tmp_path / "recipe.toml", text)
    rig = _rig("secret-rig-docker")
    plan_text = lair("plan", recipe, "--rig", rig, check=True)
    plan_json = lair("plan", recipe, "--rig", rig, "--json", check=True)
    assert _hits(plan_text.stdout + plan_text.stderr + plan_json.stdout) == []
    assert "HF_TOKEN" in plan_text.stdout and "LLAMA_API_KEY" in plan_text.stdout  # names only
    res = lair("launch", recipe, "--rig", rig, "--detach", timeout=180)
    assert res.returncode == 0, res.stderr  # ready: readiness sent the key
    run_id = res.stdout.strip()
    node = ssh_nodes_docker.nodes[0]
    base = f"http://{node.address}:{port}"
    try:
        assert _status(f"{base}/v1/models", None) == 401  # the engine enforces the key
        assert _status(f"{base}/v1/models", API_KEY) == 200
        ps = subprocess.run(
            ssh_nodes_docker.ssh_argv(node, "ps", "-eo", "args"), capture_output=True, text=True, check=True
        ).stdout
        assert "lair.engines.xllamacpp_server" in ps and _hits(ps) == []
        env = {**os.environ, "DOCKER_HOST": node.docker_host or ""}
        inspect = subprocess.run(
            ["docker", "inspect", f"lair-{run_id}-r0"], capture_output=True, text=True, env=env, check=True
        ).stdout
        assert "PLAIN=visible" in inspect and _hits(inspect) == []
        logs = lair("logs", run_id, check=True).stdout
        assert "listening" in logs and _hits(logs) == []
        assert _hits(res.stderr) == []
    finally:
        stop = lair("stop", run_id, timeout=120)
    assert stop.returncode == 0, stop.stderr
    assert _folder_hits(runs_dir(lair_home) / run_id) == {}
    saved = (runs_dir(lair_home) / run_id / "logs" / "r0.log").read_text()
    assert "unauthorized: Invalid API Key" in saved  # the engine's own log: the keyless request refused
    assert_clean(lair_home, run_id, ssh_nodes_docker, docker=True)


def test_secrets_stay_out_of_a_native_benchmarked_run_and_its_report(
    tiny_model: Path, lair_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("API_KEY", API_KEY)
    port = free_port()
    recipe = write_recipe(tmp_path / "recipe.toml", NATIVE.format(gguf=tiny_model, port=port))
    rig = _rig("secret-rig-native")
    args = ["--bench-contexts", "64", "--bench-decode-tokens", "8", "--bench-repeat", "1"]
    res = lair("launch", recipe, "--rig", rig, "--bench", *args, "--json", timeout=240)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    cells = doc["bench"]["cells"]
    assert cells and all(c["errors"] == 0 and c["completion_tokens"] for c in cells)  # authenticated
    assert doc["bench"]["options"]["api_key_given"] is True
    assert _hits(res.stdout + res.stderr) == []
    report = Path(doc["report"])
    assert (report / "results.json").exists() and _folder_hits(report) == {}
    assert _folder_hits(runs_dir(lair_home) / doc["run_id"]) == {}
    assert_clean(lair_home, doc["run_id"])
