"""The explicit pull step (``--pull missing|always|never``) against the real Docker engine: progress on
stderr, a failed pull fails before anything starts, ``never`` refuses a missing image without pulling,
and a present image is not pulled."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest
from launch_helpers import assert_clean, free_port, lair, local_containers, newest_run, run_ids, write_recipe

pytestmark = [pytest.mark.integration, pytest.mark.docker]

RECIPE = """
engine = "custom"
docker_image = "{image}"
port = {port}
host = "127.0.0.1"
ready_timeout_s = 60
entrypoint = ["python3", "-c", {serve}]
health_path = "/"
"""
SERVE = json.dumps(
    "import http.server, os, signal, sys\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\n"
    "http.server.HTTPServer(('127.0.0.1', int(os.environ['LAIR_ENGINE_PORT'])), H).serve_forever()\n"
)
ABSENT = "lair-test/never-built:1"


def _recipe(tmp_path: Path, image: str) -> str:
    return write_recipe(tmp_path / "recipe.toml", RECIPE.format(image=image, port=free_port(), serve=SERVE))


def test_a_missing_image_is_pulled_with_progress_and_its_failure_stops_the_launch(
    tmp_path: Path, lair_home: Path
) -> None:
    before = run_ids(lair_home)
    res = lair("launch", _recipe(tmp_path, ABSENT), "--detach", timeout=120)
    assert res.returncode == 1
    assert f"pulling {ABSENT} (timeout 3600s)" in res.stderr
    assert "pull: Error response from daemon" in res.stderr  # docker's own words, streamed
    assert f"docker pull {ABSENT} failed (exit 1)" in res.stderr
    assert "docker run" not in res.stderr.split("rolling back")[0]  # nothing started
    run_id = newest_run(lair_home, before)
    assert run_id and local_containers(run_id) == ""
    assert_clean(lair_home, run_id, docker=True)


def test_pull_never_refuses_a_missing_image_without_pulling(tmp_path: Path, lair_home: Path) -> None:
    res = lair("launch", _recipe(tmp_path, ABSENT), "--pull", "never", "--detach", timeout=60)
    assert res.returncode == 1
    assert f"image {ABSENT} is not there and --pull never was given" in res.stderr
    assert "pulling" not in res.stderr


def test_a_present_image_is_not_pulled(engine_image: str, tmp_path: Path, lair_home: Path) -> None:
    recipe = _recipe(tmp_path, engine_image)
    assert "docker pull if the node lacks it" in lair("plan", recipe, check=True).stdout
    res = lair("launch", recipe, "--detach", timeout=120)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    try:
        assert "pulling" not in res.stderr and f"image {engine_image} (pull missing)" in res.stderr
    finally:
        assert lair("stop", run_id, timeout=60).returncode == 0
    assert_clean(lair_home, run_id, docker=True)


def test_a_gpu_container_on_a_host_without_gpu_runtime_gets_the_capability_error(
    engine_image: str, tmp_path: Path, lair_home: Path
) -> None:
    """This machine's Docker has no GPU runtime: with the default (GPU) profile the start is refused by
    Docker ("could not select device driver"), and lair says what that means and what to set."""
    recipe = Path(_recipe(tmp_path, engine_image))
    recipe.write_text(recipe.read_text().replace('engine = "custom"', 'engine = "custom"\ngpus = "all"'))
    plan = lair("plan", str(recipe), check=True).stdout
    assert "--gpus all" in plan and "  gpus all" in plan
    before = run_ids(lair_home)
    res = lair("launch", str(recipe), "--detach", timeout=120)
    assert res.returncode == 1
    assert f"the host has no GPU container runtime ({engine_image} asked for GPUs)" in res.stderr
    assert "could not select device driver" in res.stderr  # docker's own words, kept below
    assert "[capabilities] gpus = false" in res.stderr
    run_id = newest_run(lair_home, before)
    assert run_id and local_containers(run_id) == ""
    assert_clean(lair_home, run_id, docker=True)


def test_a_pull_that_hangs_is_ended_at_its_own_timeout(tmp_path: Path, lair_home: Path) -> None:
    """A registry on loopback that accepts the connection and never answers: ``docker pull`` hangs, and
    the pull step ends at ``--pull-timeout`` (not the launch's other timeouts), with the hint, and the
    launch is rolled back with nothing started."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    image = f"127.0.0.1:{silent.getsockname()[1]}/lair-test/hangs:1"
    before = run_ids(lair_home)
    try:
        t0 = time.monotonic()
        res = lair("launch", _recipe(tmp_path, image), "--pull-timeout", "3", "--detach", timeout=120)
        took = time.monotonic() - t0
    finally:
        silent.close()
    assert res.returncode == 1, res.stderr
    assert f"pulling {image} (timeout 3s)" in res.stderr
    assert f"docker pull {image} did not finish in 3s (stopped)" in res.stderr
    assert "raise --pull-timeout" in res.stderr
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert f"pull {image}" not in ps  # the hung client was ended, not left behind
    assert took < 30, took  # docker's own dial timeout is far longer
    assert "docker run" not in res.stderr.split("rolling back")[0]
    run_id = newest_run(lair_home, before)
    assert run_id and local_containers(run_id) == ""
    assert_clean(lair_home, run_id, docker=True)
