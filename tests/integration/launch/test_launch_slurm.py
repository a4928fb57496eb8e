"""Through the real ``lair`` command on a real (private) Slurm cluster: the tiny-cpu example and a
2-node recipe submitted, served, benchmarked and stopped with nothing left (no job or step in
squeue, no live slurmstepd, no engine process, no run folder); a failing before_serve hook and a
job cancelled from outside are reported as such, and after_stop still runs on every node.

The 2-node recipes are vLLM-shaped (lair's vLLM flags after a ``sh -c`` entrypoint): the head serves,
the ``--headless`` worker reaches it, so head and workers differ and the job is a heterogeneous one
(one component per role, as Slurm's own ``squeue --json`` and ``scontrol show job`` say); a recipe
whose ranks all run the same command stays one job."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from launch_helpers import (
    assert_after_stop_ran,
    events,
    free_port,
    lair,
    start_foreground,
    wait_for,
    write_recipe,
)
from launch_roles import headless_script, role_script
from slurm_helpers import assert_nothing_left, het_components, scontrol_job

from lair.launch.slurm.jobs import SlurmJob, steps_left
from lair.testing.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "examples" / "tiny-cpu" / "recipe.toml"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
BENCH = ["--bench", "--bench-contexts", "128", "--bench-decode-tokens", "16", "--bench-repeat", "1"]


def _job(home: Path, run_id: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((home / "runs" / run_id / "slurm.json").read_text())
    return data


def test_tiny_cpu_detach_status_logs_stop(slurm_cluster: SlurmCluster, lair_home: Path) -> None:
    res = lair("launch", str(TINY), "--cluster", "test-slurm", "--detach", "--json", timeout=180)
    assert res.returncode == 0, res.stderr
    run = json.loads(res.stdout)
    run_id = run["run_id"]
    try:
        assert re.search(r"job \d+ on n1 \(127\.0\.0\.1\)", res.stderr)
        print(f"slurm tiny-cpu ready in {run['ready_s']:.2f}s", file=sys.stderr)
        with OPENER.open("http://127.0.0.1:8091/v1/models", timeout=10) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == "tiny"
        status = json.loads(lair("status", run_id, "--json", check=True).stdout)[0]
        job = _job(lair_home, run_id)
        assert status["slurm"]["job_id"] == job["job_id"] and status["slurm"]["job_state"] == "RUNNING"
        assert status["nodes"][0]["alive"] is True
        assert str(job["job_id"]) in slurm_cluster.squeue()  # the real queue has it, running
        assert "listening" in lair("logs", run_id, check=True).stdout
    finally:
        stop = lair("stop", run_id, timeout=180)
    assert stop.returncode == 0, stop.stderr
    assert re.search(rf"job {job['job_id']}: CANCELLED", stop.stderr)
    assert re.search(rf"after_stop job {job['epilogue_id']}: COMPLETED", stop.stderr)
    assert json.loads(lair("status", run_id, "--json", check=True).stdout)[0]["state"] == "stopped"
    assert_nothing_left(slurm_cluster, run_id)


def test_tiny_cpu_benchmarked_through_slurm(
    slurm_cluster: SlurmCluster, lair_home: Path, tmp_path: Path
) -> None:
    recipe = tmp_path / "tiny-cpu" / "recipe.toml"
    recipe.parent.mkdir()
    shutil.copyfile(TINY, recipe)
    res = lair("launch", str(recipe), "--cluster", "test-slurm", *BENCH, "--json", timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["state"] == "stopped"
    cell = out["bench"]["cells"][0]
    assert cell["context"] == 128 and cell["completion_tokens"] == 16 and cell["output_length_ok"]
    assert cell["ttft_ms_p50"] > 0  # (16 tokens may come in one read: no decode rate then)
    assert Path(out["report"], "results.json").exists()
    assert_nothing_left(slurm_cluster, out["run_id"])


TWO_NODES = """
engine = "{engine}"
runtime = "native"
name = "two ranks through slurm"
required_nodes = 2
pipeline_parallel_size = 2
distributed_backend = "mp"
port = {port}
host = "127.0.0.1"
health_path = "/health"
ready_timeout_s = 90
entrypoint = ["sh", "-c", '{script}', "fake-vllm"]
before_serve = ["{before}"]
after_stop = ["touch {markers}/after-stop-$LAIR_NODE_RANK"]
"""


def _two_nodes(
    tmp_path: Path, markers: Path, roles: Path, tiny_model: Path, before: str = "true", *, het: bool = True
) -> str:
    """A 2-node recipe: vLLM-shaped (head and ``--headless`` worker differ), or one command for both."""
    shape = headless_script if het else role_script
    script = shape(sys.executable, str(roles), str(tiny_model))
    engine = "vllm" if het else "custom"
    text = TWO_NODES.format(engine=engine, port=free_port(), script=script, markers=markers, before=before)
    return write_recipe(tmp_path / "two.toml", text)


@pytest.mark.parametrize("het", [True, False], ids=["head-and-workers-differ", "identical-ranks"])
def test_two_nodes_served_benchmarked_stopped(
    slurm_cluster: SlurmCluster,
    lair_home: Path,
    tmp_path: Path,
    markers: Path,
    roles: Path,
    tiny_model: Path,
    het: bool,
) -> None:
    recipe = _two_nodes(tmp_path, markers, roles, tiny_model, het=het)
    res = lair("launch", recipe, "--cluster", "test-slurm", *BENCH, "--json", timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    run_id = out["run_id"]
    assert re.search(r"job \d+ on n1 \(127\.0\.0\.1\), n2 \(127\.0\.0\.1\)", res.stderr)
    cell = out["bench"]["cells"][0]
    assert cell["completion_tokens"] == 16 and cell["output_length_ok"] and cell["ttft_ms_p50"] > 0
    worker = lair("logs", run_id, "--node", "1", check=True).stdout
    assert "worker rank 1 of 2 at 127.0.0.1 reached 127.0.0.1:29501: hello from rank 0" in worker
    plan = json.loads((lair_home / "runs" / run_id / "plan.json").read_text())
    assert [(n["name"], n["lair_env"]["LAIR_NODE_RANK"]) for n in plan["nodes"]] == [("n1", "0"), ("n2", "1")]
    job_id = int(_job(lair_home, run_id)["job_id"])  # type: ignore[call-overload]
    name = f"lair-{run_id}"
    if het:  # one component per role: the head's node, then the workers'
        assert het_components(slurm_cluster, job_id) == [(0, "n1", name), (1, "n2", name)]
        assert "engine env: VLLM_HOST_IP=127.0.0.1 GLOO_SOCKET_IFNAME=lo" in worker
    else:
        assert het_components(slurm_cluster, job_id) == []
        assert "HetJobId" not in scontrol_job(slurm_cluster, job_id)
    assert_after_stop_ran(markers)
    assert_nothing_left(slurm_cluster, run_id)


def test_failing_before_serve_is_reported_and_after_stop_runs(
    slurm_cluster: SlurmCluster, lair_home: Path, tmp_path: Path, markers: Path, roles: Path, tiny_model: Path
) -> None:
    before = "if [ $LAIR_NODE_RANK = 1 ]; then echo no GPU here >&2; exit 7; fi"
    recipe = _two_nodes(tmp_path, markers, roles, tiny_model, before=before)
    res = lair("launch", recipe, "--cluster", "test-slurm", "--detach", timeout=300)
    assert res.returncode == 1
    assert "before_serve failed on n2 (exit 7); its output:" in res.stderr and "no GPU here" in res.stderr
    assert "after_stop ran on every node" in res.stderr
    assert_after_stop_ran(markers)
    run_id = re.search(r"run (\S+): submitted", res.stderr)[1]  # type: ignore[index]
    assert json.loads(lair("status", run_id, "--json", check=True).stdout)[0]["state"] == "failed"
    job_id = int(_job(lair_home, run_id)["job_id"])  # type: ignore[call-overload]
    assert [c[:2] for c in het_components(slurm_cluster, job_id)] == [(0, "n1"), (1, "n2")]
    assert_nothing_left(slurm_cluster, run_id)


def test_job_cancelled_outside_lair_is_reported_and_after_stop_runs(
    slurm_cluster: SlurmCluster, lair_home: Path, tmp_path: Path, markers: Path, roles: Path, tiny_model: Path
) -> None:
    recipe = _two_nodes(tmp_path, markers, roles, tiny_model)
    proc, run_id = start_foreground(recipe, lair_home, "--cluster", "test-slurm")
    try:
        wait_for(lambda: "ready in" in events(lair_home, run_id), timeout=120, what="ready")
        job_id = str(_job(lair_home, run_id)["job_id"])
        status = json.loads(lair("status", run_id, "--json", check=True).stdout)[0]["slurm"]
        parts = [(c["het_job_offset"], c["nodes"], c["job_state"]) for c in status["het_components"]]
        assert parts == [(0, "n1", "RUNNING"), (1, "n2", "RUNNING")]
        shown = scontrol_job(slurm_cluster, int(job_id))  # one record per component
        assert f"HetJobId={job_id} HetJobOffset=0" in shown and f"HetJobId={job_id} HetJobOffset=1" in shown
        assert re.search(r"HetJobOffset=1 .*\n(.*\n)*?\s+NodeList=n2\n", shown)
        # the serve steps Slurm lists (one per component, on n1 and n2) are the ones lair's stop waits for
        listed = subprocess.run(
            ["squeue", "--steps", "--noheader", "--format=%i %j %N"],
            env={**os.environ, **slurm_cluster.env},
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split("\n")
        serve = {ln.split()[2]: ln.split()[0] for ln in listed if ln.split()[1:2] == ["serve"]}
        print(f"steps of the hetjob: {listed}", file=sys.stderr)
        left = steps_left(SlurmJob(**_job(lair_home, run_id)))  # type: ignore[arg-type]
        assert sorted(serve) == ["n1", "n2"] and set(serve.values()) <= set(left)
        subprocess.run(["scancel", job_id], env={**os.environ, **slurm_cluster.env}, check=True, timeout=30)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=180)
    assert proc.returncode == 1
    assert f"job {job_id} was cancelled outside lair (scancel)" in err
    assert "after_stop ran on every node" in err
    assert_after_stop_ran(markers)
    assert json.loads(lair("status", run_id, "--json", check=True).stdout)[0]["state"] == "failed"
    assert_nothing_left(slurm_cluster, run_id)


DOCKER_RECIPE = """
engine = "custom"
docker_image = "{image}"
name = "docker through slurm"
port = {port}
host = "127.0.0.1"
ready_timeout_s = 60
gpus = "none"
entrypoint = ["sh", "-c", '{script}']
env = {{ LAIR_TEST_TOKEN = "{{LAIR_TEST_TOKEN}}" }}
after_stop = ["touch {markers}/after-stop-$LAIR_NODE_RANK"]

[[extra_mounts]]
host = "{repo}"
container = "/model"
read_only = true

[placeholders.LAIR_TEST_TOKEN]
type = "secret"
"""
DOCKER_SERVE = (
    "test ${{#LAIR_TEST_TOKEN}} = {length} && test -f /model/sub/tiny-llama.gguf && "
    "exec python3 -m lair.engines.xllamacpp_server --model /model/sub/tiny-llama.gguf --host 127.0.0.1 "
    "--port $LAIR_ENGINE_PORT"
)
TOKEN = "tok-slurm-7c1e-secret"


@pytest.mark.docker
def test_docker_container_through_slurm(
    slurm_cluster: SlurmCluster,
    lair_home: Path,
    tmp_path: Path,
    markers: Path,
    engine_image: str,
    tiny_model: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from launch_helpers import hub_repo, local_containers

    slurm_cluster.write_cluster("test-slurm-docker", lair_home / "clusters.toml", container="docker")
    monkeypatch.setenv("LAIR_TEST_TOKEN", TOKEN)
    repo, port = hub_repo(tmp_path, tiny_model), free_port()
    script = DOCKER_SERVE.format(length=len(TOKEN))  # the secret reached the container (not its argv)
    text = DOCKER_RECIPE.format(image=engine_image, port=port, script=script, repo=repo, markers=markers)
    res = lair(
        "launch", write_recipe(tmp_path / "d.toml", text), "--cluster", "test-slurm-docker", "--detach"
    )
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    try:
        with OPENER.open(f"http://127.0.0.1:{port}/v1/models", timeout=10) as resp:
            assert json.loads(resp.read())["data"]
        inspect = subprocess.run(["docker", "inspect", f"lair-{run_id}-r0"], capture_output=True, text=True)
        mounts = {m["Destination"]: (m["Source"], m["RW"]) for m in json.loads(inspect.stdout)[0]["Mounts"]}
        assert mounts["/model/sub/tiny-llama.gguf"] == (str(repo / "blobs" / "sha256-gguf"), False)
    finally:
        stop = lair("stop", run_id, timeout=180)
    assert stop.returncode == 0, stop.stderr
    assert local_containers(run_id) == ""
    assert_after_stop_ran(markers, (0,))
    run_dir = lair_home / "runs" / run_id
    assert all(TOKEN not in p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file())
    assert_nothing_left(slurm_cluster, run_id)


def test_foreground_run_stopped_from_another_shell(slurm_cluster: SlurmCluster, lair_home: Path) -> None:
    """``lair stop`` of a foreground Slurm run asks its lair process, which cancels the job."""
    proc, run_id = start_foreground(str(TINY), lair_home, "--cluster", "test-slurm")
    try:
        wait_for(lambda: "ready in" in events(lair_home, run_id), timeout=120, what="ready")
        stop = lair("stop", run_id, timeout=180)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=180)
    assert stop.returncode == 0, stop.stderr
    assert proc.returncode == 0, err
    assert "SIGTERM: stopping" in err and f"run {run_id} stopped" in err
    assert json.loads(lair("status", run_id, "--json", check=True).stdout)[0]["state"] == "stopped"
    assert_nothing_left(slurm_cluster, run_id)


def test_two_nodes_each_at_its_own_address(
    slurm_netns_cluster: SlurmCluster,
    lair_home: Path,
    tmp_path: Path,
    markers: Path,
    roles: Path,
    tiny_model: Path,
) -> None:
    """Each slurmd in its own network namespace: the plan's head address and every rank's wiring
    come from the addresses of the nodes Slurm allocated."""
    assert slurm_netns_cluster.netns is not None
    addrs = [n.address for n in slurm_netns_cluster.netns.nodes]
    recipe = Path(_two_nodes(tmp_path, markers, roles, tiny_model))
    recipe.write_text(recipe.read_text().replace('host = "127.0.0.1"', 'host = "0.0.0.0"'))
    res = lair("launch", str(recipe), "--cluster", "test-slurm-netns", *BENCH, "--json", timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    run_id = out["run_id"]
    assert f"job {_job(lair_home, run_id)['job_id']} on n1 ({addrs[0]}), n2 ({addrs[1]})" in res.stderr
    assert f"waiting for http://{addrs[0]}:" in res.stderr  # readiness polled at the head's address
    assert out["bench"]["cells"][0]["completion_tokens"] == 16
    worker = lair("logs", run_id, "--node", "1", check=True).stdout
    assert (
        f"worker rank 1 of 2 at {addrs[1]} reached {addrs[0]}:29501: hello from rank 0 at {addrs[0]}"
        in worker
    )
    # the worker's own address and interface (the fixture names each node's link eth0), found on it
    assert f"engine env: VLLM_HOST_IP={addrs[1]} GLOO_SOCKET_IFNAME=eth0" in worker
    job_id = int(_job(lair_home, run_id)["job_id"])  # type: ignore[call-overload]
    assert [c[:2] for c in het_components(slurm_netns_cluster, job_id)] == [(0, "n1"), (1, "n2")]
    plan = json.loads((lair_home / "runs" / run_id / "plan.json").read_text())
    assert [n["lair_env"]["LAIR_MASTER_ADDR"] for n in plan["nodes"]] == [addrs[0], addrs[0]]
    assert_after_stop_ran(markers)
    assert_nothing_left(slurm_netns_cluster, run_id)
