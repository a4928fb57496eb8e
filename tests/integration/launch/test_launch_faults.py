"""Fault injection on 2 SSH nodes (native runtime: real processes over SSH). After every fault: no
process, run folder (env-file) or lease is left, and ``after_stop`` ran on every reachable node."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from launch_helpers import (
    assert_after_stop_ran,
    assert_clean,
    events,
    lair,
    newest_run,
    pid_alive,
    run_ids,
    run_record,
    signal_and_wait,
    start_foreground,
    wait_for,
    write_recipe,
)
from launch_roles import role_script

from lair.launch.fault_injection import PAUSE_ENV
from lair.testing.nodes import NetnsNodes

pytestmark = [pytest.mark.integration, pytest.mark.ssh]

HEAD = """
engine = "custom"
runtime = "native"
name = "fault test"
required_nodes = 2
pipeline_parallel_size = 2
distributed_backend = "mp"
cluster = "test-nodes"
port = 8000
ready_timeout_s = {ready}
entrypoint = ["sh", "-c", '{script}']
before_serve = [{before}]
after_stop = [{{ run = "{after_busy}touch {markers}/after-stop-$LAIR_NODE_RANK" }}]
"""


def _recipe(
    tmp_path: Path,
    markers: Path,
    *,
    script: str,
    before: str = "",
    ready: float = 60,
    slow_after: bool = False,
) -> str:
    after_busy = f"echo $$ > {markers}/stopping-$LAIR_NODE_RANK; sleep 2; " if slow_after else ""
    text = HEAD.format(ready=ready, script=script, before=before, markers=markers, after_busy=after_busy)
    return write_recipe(tmp_path / "recipe.toml", text)


def _serving(roles: Path, tiny_model: Path) -> str:
    return role_script(sys.executable, str(roles), str(tiny_model))


def _pids(markers: Path, prefix: str) -> list[int]:
    return [int(p.read_text().split()[0]) for p in sorted(markers.glob(f"{prefix}-*"))]


def _launch_fails(recipe: str, *args: str) -> tuple[str, str]:
    home = Path(os.environ["LAIR_HOME"])
    before = run_ids(home)
    res = lair("launch", recipe, *args, timeout=180)
    assert res.returncode == 1, res.stderr
    run_id = newest_run(home, before)
    assert run_id is not None
    return run_id, res.stderr


def test_hook_failure_fails_the_launch_and_rolls_back(
    ssh_nodes: NetnsNodes, lair_home: Path, tmp_path: Path, markers: Path, roles: Path, tiny_model: Path
) -> None:
    # rank 1 fails at once while rank 0 is still busy: rank 0's hook is cut short, not awaited
    busy = f"echo $$ > {markers}/busy-0; exec sleep 120"
    fail = "echo hook-said-no >&2; exit 3"
    before = f'{{ run = "if [ $LAIR_NODE_RANK = 1 ]; then {fail}; fi; {busy}" }}'
    recipe = _recipe(tmp_path, markers, script=_serving(roles, tiny_model), before=before)
    t0 = time.monotonic()
    run_id, err = _launch_fails(recipe)
    assert time.monotonic() - t0 < 60
    assert "hook-said-no" in err and "exit code: 3" in err and "rolling back" in err
    assert not [p for p in _pids(markers, "busy") if pid_alive(p)]
    assert run_record(lair_home, run_id)["state"] == "failed"
    assert not any(n["started"] for n in run_record(lair_home, run_id)["nodes"])
    assert_after_stop_ran(markers)
    assert_clean(lair_home, run_id)


def test_hook_failure_with_warn_goes_on(
    ssh_nodes: NetnsNodes, lair_home: Path, tmp_path: Path, markers: Path, roles: Path, tiny_model: Path
) -> None:
    before = '{ run = "exit 3", on_failure = "warn" }'
    recipe = _recipe(tmp_path, markers, script=_serving(roles, tiny_model), before=before)
    res = lair("launch", recipe, "--detach", timeout=180)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    assert res.stderr.count("on_failure = warn") == 2
    stop = lair("stop", run_id, timeout=120)
    assert stop.returncode == 0 and "checked: no container or process left" in stop.stderr, stop.stderr
    assert_after_stop_ran(markers)
    assert_clean(lair_home, run_id)


def test_engine_exit_during_start_up_fails_at_once_with_its_log(
    ssh_nodes: NetnsNodes, lair_home: Path, tmp_path: Path, markers: Path
) -> None:
    script = 'if [ "$LAIR_NODE_RANK" = 1 ]; then echo engine-boom >&2; exit 7; fi; exec sleep 120'
    run_id, err = _launch_fails(_recipe(tmp_path, markers, script=script, ready=120))
    assert "process exited during start-up" in err and "engine-boom" in err
    assert_after_stop_ran(markers)
    assert_clean(lair_home, run_id)


def test_readiness_timeout(ssh_nodes: NetnsNodes, lair_home: Path, tmp_path: Path, markers: Path) -> None:
    run_id, err = _launch_fails(_recipe(tmp_path, markers, script="exec sleep 120", ready=1.5))
    assert "not ready after 1.5s" in err and "/health" in err
    assert_after_stop_ran(markers)
    assert_clean(lair_home, run_id)


def test_unreachable_node(ssh_nodes: NetnsNodes, lair_home: Path, tmp_path: Path, markers: Path) -> None:
    """The doctor's fast checks find the dead node before anything is leased or started; with
    ``--no-doctor`` the launch itself meets it, stops the node that did start and leaves nothing."""
    dead = ssh_nodes.nodes[0].address.rsplit(".", 1)[0] + ".250"  # on the bridge, nobody there
    recipe = _recipe(tmp_path, markers, script="exec sleep 120")
    nodes = f"{ssh_nodes.nodes[0].address},{dead}"
    before = run_ids(lair_home)
    res = lair("launch", recipe, "--nodes", nodes, timeout=180)
    assert res.returncode == 1, res.stderr
    assert "[doctor check " in res.stderr and f"cannot connect to root@{dead}:22" in res.stderr
    assert "nothing was leased" in res.stderr
    assert newest_run(lair_home, before) is None  # no run was made
    assert not list(markers.glob("*"))  # no hook ran on any node
    run_id, err = _launch_fails(recipe, "--nodes", nodes, "--no-doctor")
    assert f"cannot connect to root@{dead}:22" in err
    assert_after_stop_ran(markers, (0,))
    assert_clean(lair_home, run_id)


STAGES = ["before_serve", "ready", "serving"]


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
@pytest.mark.parametrize("stage", STAGES)
def test_signal_during_stage_stops_cleanly(
    stage: str, sig: int, ssh_nodes: NetnsNodes, lair_home: Path, tmp_path: Path, markers: Path,
    roles: Path, tiny_model: Path,
) -> None:  # fmt: skip
    script = _serving(roles, tiny_model)
    before = ""
    if stage == "before_serve":
        before = f'{{ run = "echo $$ > {markers}/busy-$LAIR_NODE_RANK; exec sleep 120" }}'
    if stage == "ready":
        script = f"echo $$ > {markers}/busy-$LAIR_NODE_RANK; exec sleep 120"
    proc, run_id = start_foreground(_recipe(tmp_path, markers, script=script, before=before), lair_home)
    if stage == "serving":
        wait_for(lambda: run_record(lair_home, run_id)["state"] == "running", what="running")
    else:
        wait_for(lambda: len(list(markers.glob("busy-*"))) == 2, what=f"both nodes in {stage}")
    busy = _pids(markers, "busy")
    rc, err = signal_and_wait(proc, sig)
    assert rc == (0 if stage == "serving" else 130), err
    assert f"{signal.Signals(sig).name}: stopping" in err
    assert run_record(lair_home, run_id)["state"] == ("stopped" if stage == "serving" else "failed")
    assert not [p for p in busy if pid_alive(p)]
    assert_after_stop_ran(markers)
    assert_clean(lair_home, run_id)


@pytest.mark.parametrize("stage", ["prepare", "stage_mounts", "start", "serve"])
def test_signal_paused_before_a_fast_stage_stops_cleanly(
    stage: str, ssh_nodes: NetnsNodes, lair_home: Path, tmp_path: Path, markers: Path
) -> None:
    # these stages take milliseconds: LAIR_PAUSE_BEFORE_STAGE holds lair at their start for the signal
    recipe = _recipe(tmp_path, markers, script="exec sleep 120")
    proc, run_id = start_foreground(recipe, lair_home, env={PAUSE_ENV: stage})
    wait_for(lambda: f"paused before {stage}" in events(lair_home, run_id), what=f"the pause before {stage}")
    pids = [n["pid"] for n in run_record(lair_home, run_id)["nodes"] if n["pid"]]
    assert len(pids) == (2 if stage == "serve" else 0)
    rc, err = signal_and_wait(proc, signal.SIGINT)
    assert rc == 130 and "SIGINT: stopping" in err, err
    assert run_record(lair_home, run_id)["state"] == "failed"
    assert_after_stop_ran(markers)
    assert_clean(lair_home, run_id)


def test_stop_from_another_shell(
    ssh_nodes: NetnsNodes, lair_home: Path, tmp_path: Path, markers: Path, roles: Path, tiny_model: Path
) -> None:
    proc, run_id = start_foreground(_recipe(tmp_path, markers, script=_serving(roles, tiny_model)), lair_home)
    wait_for(lambda: run_record(lair_home, run_id)["state"] == "running", what="running")
    stop = lair("stop", run_id, timeout=120)
    assert stop.returncode == 0 and "checked: no container or process left" in stop.stderr, stop.stderr
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "SIGTERM: stopping" in err
    assert_after_stop_ran(markers)
    assert_clean(lair_home, run_id)


def test_killed_lair_process_leaves_an_orphan_that_stop_cleans(
    ssh_nodes: NetnsNodes, lair_home: Path, tmp_path: Path, markers: Path, roles: Path, tiny_model: Path
) -> None:
    proc, run_id = start_foreground(_recipe(tmp_path, markers, script=_serving(roles, tiny_model)), lair_home)
    wait_for(lambda: run_record(lair_home, run_id)["state"] == "running", what="running")
    proc.kill()  # SIGKILL: no clean-up from the launching process
    proc.communicate(timeout=30)
    status = json.loads(lair("status", run_id, "--json", check=True).stdout)[0]
    assert status["state"] == "orphaned" and [n["alive"] for n in status["nodes"]] == [True, True]
    stop = lair("stop", run_id, timeout=120)
    assert stop.returncode == 0 and "checked: no container or process left" in stop.stderr, stop.stderr
    assert_after_stop_ran(markers)
    assert_clean(lair_home, run_id)


def test_second_signal_during_rollback_does_not_cut_it_short(
    ssh_nodes: NetnsNodes, lair_home: Path, tmp_path: Path, markers: Path, roles: Path, tiny_model: Path
) -> None:
    recipe = _recipe(tmp_path, markers, script=_serving(roles, tiny_model), slow_after=True)
    proc, run_id = start_foreground(recipe, lair_home)
    wait_for(lambda: run_record(lair_home, run_id)["state"] == "running", what="running")
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: len(list(markers.glob("stopping-*"))) == 2, what="after_stop hooks running")
    rc, err = signal_and_wait(proc, signal.SIGINT)
    assert rc == 0 and "SIGINT: already stopping" in err, err
    assert_after_stop_ran(markers)
    assert_clean(lair_home, run_id)
