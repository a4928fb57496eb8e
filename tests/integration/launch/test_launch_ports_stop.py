"""On this machine, through the real ``lair`` command: a busy port is refused before anything starts
(naming the holder), a second run on the same machine is refused by its lease, a native stop ends a
grandchild that left the process group, and two concurrent ``lair stop`` run one teardown."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_helpers import (
    assert_clean,
    free_port,
    lair,
    pid_alive,
    run_record,
    wait_for,
    write_recipe,
)

pytestmark = [pytest.mark.integration]

# the engine forks a grandchild that moves into its own process group (as a daemonising helper
# would): a stop that only signals the group would leave it running
SERVER = (
    "import http.server, json, os, subprocess, sys\n"
    "subprocess.Popen(['sh', '-c', 'echo $$ > {marker}; exec sleep 600'], start_new_session=True)\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = json.dumps({{'data': [{{'id': 'mine'}}]}}).encode()\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(body)\n"
    "    def log_message(self, *a): pass\n"
    "http.server.HTTPServer(('127.0.0.1', int(os.environ['LAIR_ENGINE_PORT'])), H).serve_forever()\n"
)
RECIPE = """
engine = "custom"
runtime = "native"
served_model_name = "mine"
host = "127.0.0.1"
port = {port}
ready_timeout_s = 30
entrypoint = ["{python}", "-c", {server}]
after_stop = [{{ run = "echo x >> {markers}/after-stop" }}]
"""


def _recipe(tmp_path: Path, markers: Path, port: int) -> str:
    import json

    server = json.dumps(SERVER.format(marker=markers / "grandchild.pid"))
    text = RECIPE.format(port=port, python=sys.executable, server=server, markers=markers)
    return write_recipe(tmp_path / "recipe.toml", text)


@pytest.fixture
def squatter() -> Iterator[tuple[int, int]]:
    """A plain HTTP server of someone else's on a free port: (port, pid)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ss = ["ss", "-Hltn", f"sport = :{port}"]
    wait_for(lambda: subprocess.run(ss, capture_output=True, text=True).stdout.strip(), what="squatter")
    yield port, proc.pid
    proc.terminate()
    proc.wait(timeout=10)


def test_a_busy_port_fails_before_start_naming_the_holder(
    squatter: tuple[int, int], tmp_path: Path, markers: Path, lair_home: Path
) -> None:
    port, pid = squatter
    res = lair("launch", _recipe(tmp_path, markers, port), "--detach", timeout=60)
    assert res.returncode == 1
    holder = (
        rf"port {port} on local is in use by pid {pid} \(group \d+\): {re.escape(sys.executable)} -m http"
    )
    assert re.search(holder, res.stderr), res.stderr
    assert "start process" not in res.stderr and not (markers / "grandchild.pid").exists()  # never started


def test_a_second_run_on_the_same_machine_is_refused(tmp_path: Path, markers: Path, lair_home: Path) -> None:
    port = free_port()
    recipe = _recipe(tmp_path, markers, port)
    first = lair("launch", recipe, "--detach", timeout=60)
    assert first.returncode == 0, first.stderr
    run_id = first.stdout.strip()
    try:
        other = tmp_path / "other"
        other.mkdir()
        second = lair("launch", _recipe(other, markers, free_port()), "--detach", timeout=60)
        assert second.returncode == 1 and f"nodes busy: local (held by run {run_id})" in second.stderr
        same_port = lair("launch", "--nodes", "127.0.0.1", recipe, "--detach", timeout=60)
        assert same_port.returncode == 1 and f"held by run {run_id}" in same_port.stderr
    finally:
        assert lair("stop", run_id, timeout=60).returncode == 0
    assert_clean(lair_home, run_id)


def test_native_stop_ends_a_grandchild_and_concurrent_stops_tear_down_once(
    tmp_path: Path, markers: Path, lair_home: Path
) -> None:
    res = lair("launch", _recipe(tmp_path, markers, free_port()), "--detach", timeout=60)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    leader = run_record(lair_home, run_id)["nodes"][0]["pid"]
    grandchild = int(wait_for(lambda: (markers / "grandchild.pid").read_text().strip() or None, what="pid"))
    assert pid_alive(grandchild) and os.getpgid(grandchild) != leader  # out of the engine's group
    cmd = [sys.executable, "-m", "lair", "stop", run_id]
    stops = [subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[1] for p in stops]
    results = [(p.returncode, err) for p, err in zip(stops, outs, strict=True)]
    assert [rc for rc, _ in results] == [0, 0], results
    assert all(f"{run_id}: stopped; checked" in err for _, err in results)
    assert not pid_alive(grandchild) and not pid_alive(leader)
    assert (markers / "after-stop").read_text() == "x\n"  # after_stop ran once
    again = lair("stop", run_id, timeout=60)  # idempotent
    assert again.returncode == 0 and "stopped" in again.stderr
    assert_clean(lair_home, run_id)


FAILING = (
    "import sys\n"
    "for i in range(40): print('loading shard', i, flush=True)\n"
    "def load():\n"
    "    raise ValueError('weights file is truncated: model-00002.safetensors')\n"
    "try:\n"
    "    load()\n"
    "except ValueError:\n"
    "    import traceback; traceback.print_exc()\n"
    "for i in range(60): print('cleanup step', i, flush=True)\n"
    "print('See root cause above', flush=True)\n"
    "sys.exit(1)\n"
)


def test_an_engine_failure_shows_its_root_cause_and_the_log(tmp_path: Path, lair_home: Path) -> None:
    import json

    text = (
        f'engine = "custom"\nruntime = "native"\nport = {free_port()}\nready_timeout_s = 30\n'
        f'entrypoint = [{json.dumps(sys.executable)}, "-c", {json.dumps(FAILING)}]\n'
    )
    res = lair("launch", write_recipe(tmp_path / "recipe.toml", text), timeout=60)
    assert res.returncode == 1
    err = res.stderr
    cause = err.index("root cause (first error lines of the log):")
    assert err.index("Traceback (most recent call last):", cause) < err.index(
        "ValueError: weights file", cause
    )
    assert "See root cause above" in err[err.index("last log lines:") :]  # the tail alone would hide it
    assert re.search(r"whole log: /tmp/lair-[\w-]+-r0/engine\.log on local", err)


def test_readiness_refuses_a_server_that_is_not_the_runs(
    tmp_path: Path, markers: Path, lair_home: Path
) -> None:
    recipe = Path(_recipe(tmp_path, markers, free_port()))
    recipe.write_text(
        recipe.read_text().replace('served_model_name = "mine"', 'served_model_name = "theirs"')
    )
    res = lair("launch", str(recipe), "--detach", timeout=60)
    assert res.returncode == 1
    assert "is not this run's: it serves ['mine'] (HTTP 200), the run serves 'theirs'" in res.stderr
    grandchild = int((markers / "grandchild.pid").read_text())
    assert not pid_alive(grandchild)  # rolled back, descendants included
