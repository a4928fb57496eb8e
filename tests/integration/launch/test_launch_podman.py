"""``runtime = "podman"`` on this machine, through the real ``lair`` command and real podman.

The engine image is loaded into podman's storage once per session (``engine_image_in_podman``). The
host refuses podman's default ulimits (nofile and nproc of 1048576), so the rig's capability profile
caps them and the plan passes them as ``--ulimit``. The node is given as ``--nodes 127.0.0.1``: still
this machine, but leased (ad hoc), so the lease check means something.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest
from launch_helpers import (
    assert_after_stop_ran,
    assert_clean,
    events,
    free_port,
    lair,
    local_containers,
    newest_run,
    run_ids,
    run_record,
    signal_and_wait,
    start_foreground,
    wait_for,
    write_recipe,
)

from lair.inventory import leases
from lair.rig import set_rig_values

pytestmark = [pytest.mark.integration, pytest.mark.docker]

RECIPE = """
engine = "xllamacpp"
runtime = "podman"
docker_image = "{image}"
name = "tiny in podman"
model = "/model/{gguf}"
served_model_name = "tiny"
host = "127.0.0.1"
port = {port}
ready_timeout_s = 60
memory_limit = "1g"
after_stop = [{{ run = "touch {markers}/after-stop-$LAIR_NODE_RANK" }}]

[[extra_mounts]]
host = "{model_dir}"
container = "/model"
read_only = true
"""
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# modest limits any host allows, never above this process's own hard limits
NOFILE = min(16384, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
NPROC = min(4096, resource.getrlimit(resource.RLIMIT_NPROC)[1])


@pytest.fixture(scope="module")
def podman_rig(lair_home: Path) -> str:
    caps = {"max_ulimit_nofile": str(NOFILE), "max_ulimit_nproc": str(NPROC)}
    set_rig_values("podman-host", caps, section="capabilities")
    return "podman-host"


def _stream(port: int) -> list[str]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    body |= {"stream": True, "ignore_eos": True}
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with OPENER.open(req, timeout=60) as resp:
        return [ln.decode().strip() for ln in resp if ln.strip()]


def _podman(*args: str) -> str:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=True).stdout.strip()


def test_podman_serves_streams_and_stops_clean(
    engine_image_in_podman: str, tiny_model: Path, podman_rig: str, lair_home: Path,
    tmp_path: Path, markers: Path,
) -> None:  # fmt: skip
    port = free_port()
    text = RECIPE.format(
        image=engine_image_in_podman,
        gguf=tiny_model.name,
        port=port,
        markers=markers,
        model_dir=tiny_model.parent,
    )
    recipe = write_recipe(tmp_path / "r.toml", text)
    proc, run_id = start_foreground(recipe, lair_home, "--nodes", "127.0.0.1", "--rig", podman_rig)
    wait_for(lambda: "ready in" in events(lair_home, run_id), timeout=60, what="the engine in podman")
    assert run_id in {lease.run_id for lease in leases().values()}
    container = f"lair-{run_id}-r0"
    assert _podman("inspect", "-f", "{{.State.Running}}", container) == "true"
    assert local_containers(run_id) == ""  # in podman's storage, not Docker's
    limits = "import resource as r; print(r.getrlimit(r.RLIMIT_NOFILE), r.getrlimit(r.RLIMIT_NPROC))"
    assert _podman("exec", container, "python3", "-c", limits) == f"({NOFILE}, {NOFILE}) ({NPROC}, {NPROC})"
    lines = _stream(port)
    chunks = [json.loads(ln[5:]) for ln in lines if ln.startswith("data: {")]
    assert lines[-1] == "data: [DONE]"
    assert any(c["choices"] and c["choices"][0]["delta"].get("content") for c in chunks)
    assert "listening" in lair("logs", run_id, check=True).stdout  # `podman logs`

    rc, err = signal_and_wait(proc, signal.SIGTERM)
    assert rc == 0, err
    assert "podman rm" in events(lair_home, run_id) and run_record(lair_home, run_id)["state"] == "stopped"
    assert local_containers(run_id, binary="podman") == ""
    assert_after_stop_ran(markers, (0,))
    assert_clean(lair_home, run_id)  # no process, run folder (env-file) or lease


def test_an_image_missing_from_podman_storage_fails_clearly_and_pulls_nothing(
    podman_rig: str, lair_home: Path, tmp_path: Path, markers: Path
) -> None:
    image = "lair-test/absent:1"
    text = RECIPE.format(image=image, gguf="x.gguf", port=free_port(), markers=markers, model_dir=tmp_path)
    before = run_ids(lair_home)
    res = lair("launch", write_recipe(tmp_path / "r.toml", text), "--nodes", "127.0.0.1", "--rig", podman_rig)
    assert res.returncode == 1
    assert f"image {image} is not in podman's storage on the node" in res.stderr, res.stderr
    assert "hint: pull or load it there first" in res.stderr and "Traceback" not in res.stderr
    run_id = newest_run(lair_home, before)
    assert run_id and run_record(lair_home, run_id)["state"] == "failed"
    assert subprocess.run(["podman", "image", "exists", image]).returncode == 1  # nothing was pulled
    assert local_containers(run_id, binary="podman") == ""
    assert_after_stop_ran(markers, (0,))
    assert_clean(lair_home, run_id)
