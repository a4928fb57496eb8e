"""End to end: a 2-node recipe on 2 SSH nodes, each with its own Docker engine and network.

The head serves llama.cpp (xllamacpp) in a container; the worker's container gets the rank and the
master address/port from the plan and really reaches the head over the nodes' bridge. The test
streams a completion from the head, stops the run from another ``lair`` process and checks that
nothing is left on either node.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest
from launch_helpers import assert_clean, lair, run_record, start_lair, wait_for, write_recipe
from launch_roles import role_script, write_roles

from lair.testing.nodes import NetnsNodes

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.ssh]

RECIPE = """
engine = "custom"
docker_image = "{image}"
name = "two-node e2e"
required_nodes = 2
pipeline_parallel_size = 2
distributed_backend = "mp"
cluster = "test-docker-nodes"
port = 8000
shm_size = "256m"
memory_limit = "1g"
cpus = 1
ready_timeout_s = 120
entrypoint = ["sh", "-c", '{script}']
after_stop = [{{ run = "touch {markers}/after-stop-$LAIR_NODE_RANK" }}]

[[extra_mounts]]
host = "{model_dir}"
container = "/model"
read_only = true

[[extra_mounts]]
host = "{roles}"
container = "/roles"
read_only = true

[env]
ROLE_NOTE = "visible in the plan"
"""

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _stream(base: str) -> list[str]:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8,
        "stream": True,
        "ignore_eos": True,
    }
    req = urllib.request.Request(
        f"{base}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with OPENER.open(req, timeout=60) as resp:
        return [ln.decode().strip() for ln in resp if ln.strip()]


def _pgrep(pattern: str) -> str:
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.strip()


def _docker(node_host: str, *args: str) -> str:
    env = {**os.environ, "DOCKER_HOST": node_host}
    return subprocess.run(["docker", *args], capture_output=True, text=True, env=env, check=True).stdout


def test_two_nodes_in_docker_serve_stream_and_stop_clean(
    ssh_nodes_docker: NetnsNodes,
    engine_image_on_nodes: str,
    tiny_model: Path,
    lair_home: Path,
    tmp_path: Path,
) -> None:
    roles = write_roles(tmp_path / "roles")
    markers = tmp_path / "markers"
    markers.mkdir()
    script = role_script("python3", "/roles", "/model/tiny-llama.gguf")
    recipe = write_recipe(
        tmp_path / "recipe.toml",
        RECIPE.format(
            image=engine_image_on_nodes,
            script=script,
            markers=markers,
            model_dir=tiny_model.parent,
            roles=roles,
        ),
    )

    plan = json.loads(lair("plan", recipe, "--json", check=True).stdout)
    head, worker = plan["nodes"]
    start = next(s for s in worker["steps"] if s["stage"] == "start")["argv"]
    assert start[:3] == ["docker", "run", "-d"] and "--memory-swap" in start

    res = lair("launch", recipe, "--detach", timeout=240)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    try:
        rec = run_record(lair_home, run_id)
        assert rec["state"] == "running" and [n["address"] for n in rec["nodes"]] == [
            head["address"],
            worker["address"],
        ]
        lines = _stream(f"http://{head['address']}:8000")
        chunks = [json.loads(ln[5:]) for ln in lines if ln.startswith("data: {")]
        assert lines[-1] == "data: [DONE]" and any(
            c["choices"] and c["choices"][0]["delta"].get("content") for c in chunks
        )

        n0, n1 = ssh_nodes_docker.nodes
        assert n1.docker_host is not None
        wlog = wait_for(
            lambda: "reached" in (out := _docker(n1.docker_host or "", "logs", f"lair-{run_id}-r1")) and out,
            what="the worker's rendezvous",
        )
        reached = f"worker rank 1 of 2 at {n1.address} reached {n0.address}:29501"
        assert f"{reached}: hello from rank 0 at {n0.address}" in wlog
        assert "worker rank 1" in lair("logs", run_id, "--node", "1", check=True).stdout
        follow = start_lair("logs", run_id, "-f", "--node", "1")
        assert follow.stdout is not None and "worker rank 1" in follow.stdout.readline()
        follow.terminate()
        assert follow.communicate(timeout=30) is not None and follow.returncode == 0
        reader = f"logs --tail 100 -f lair-{run_id}-r1"
        wait_for(lambda: _pgrep(reader) == "", what="the remote `docker logs -f` to end")
        status = json.loads(lair("status", run_id, "--json", check=True).stdout)[0]
        assert status["state"] == "running" and [n["alive"] for n in status["nodes"]] == [True, True]
    finally:
        stop = lair("stop", run_id, timeout=180)
    assert stop.returncode == 0, stop.stderr
    assert "checked: no container or process left" in stop.stderr
    assert sorted(p.name for p in markers.iterdir()) == ["after-stop-0", "after-stop-1"]
    assert run_record(lair_home, run_id)["state"] == "stopped"
    assert_clean(lair_home, run_id, ssh_nodes_docker, docker=True)
    assert "worker rank 1" in lair("logs", run_id, "--node", "1", check=True).stdout  # saved at stop
