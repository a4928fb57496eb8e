"""SIGINT, SIGTERM and SIGHUP during every start-up stage of a Docker launch on this machine.

``LAIR_PAUSE_BEFORE_STAGE`` holds ``lair launch`` at the start of the stage (the earlier stages have
run, this one has not) until the signal comes, so the signal lands there every time, even in
stages that otherwise take milliseconds (each stage with one signal, the three in turn; the full grid
with ``LAIR_TEST_EXTENDED=1``). Afterwards: exit code 130, the run ``failed``, no
container, process, run folder (env-file) or lease left, and ``after_stop`` ran.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from launch_helpers import (
    assert_after_stop_ran,
    assert_clean,
    events,
    free_port,
    hub_repo,
    local_containers,
    run_record,
    signal_and_wait,
    start_foreground,
    wait_for,
    write_recipe,
)

from lair.inventory import leases
from lair.launch.fault_injection import PAUSABLE, PAUSE_ENV

pytestmark = [pytest.mark.integration, pytest.mark.docker]

STAGES = [s.value for s in PAUSABLE]
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
# PID 1 of a container ignores SIGTERM unless it handles it: handle it, so `docker stop` is quick
IDLE = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(600)"

RECIPE = """
engine = "custom"
docker_image = "{image}"
name = "signal per stage"
port = {port}
host = "127.0.0.1"
ready_timeout_s = 60
entrypoint = ["python3", "-c", "{idle}"]
before_serve = [{{ run = "touch {markers}/before-serve-$LAIR_NODE_RANK" }}]
after_stop = [{{ run = "touch {markers}/after-stop-$LAIR_NODE_RANK" }}]

[[extra_mounts]]
host = "{repo}"
container = "/model"
read_only = true
"""


def _ran(stage: str, before: str) -> bool:
    """Whether ``before`` ran when lair paused at the start of ``stage``."""
    return STAGES.index(before) < STAGES.index(stage)


# Every stage and every signal in each run (the signals taken in turn, stage by stage: 6 launches);
# the other 12 pairs of the 6 x 3 grid are ``extended`` (SIGINT arrives as KeyboardInterrupt, SIGTERM
# and SIGHUP through one handler: the grid's other pairs take the same two paths at the same stages).
CASES = [
    pytest.param(stage, sig, id=f"{stage}-{sig.name}", marks=[] if i % 3 == j else [pytest.mark.extended])
    for i, stage in enumerate(STAGES)
    for j, sig in enumerate(SIGNALS)
]


@pytest.mark.parametrize(("stage", "sig"), CASES)
def test_signal_at_each_start_up_stage_leaves_nothing(
    stage: str, sig: signal.Signals, engine_image: str, tiny_model: Path, lair_home: Path,
    tmp_path: Path, markers: Path,
) -> None:  # fmt: skip
    repo = hub_repo(tmp_path, tiny_model)  # stage_mounts has real work: per-file hub mounts
    text = RECIPE.format(image=engine_image, port=free_port(), idle=IDLE, markers=markers, repo=repo)
    recipe = write_recipe(tmp_path / "r.toml", text)
    # --nodes 127.0.0.1: still this machine, but leased (ad hoc), so the lease check means something
    proc, run_id = start_foreground(recipe, lair_home, "--nodes", "127.0.0.1", env={PAUSE_ENV: stage})
    wait_for(lambda: f"paused before {stage}" in events(lair_home, run_id), what=f"the pause before {stage}")
    assert run_id in {lease.run_id for lease in leases().values()}
    workdir = Path(f"/tmp/lair-{run_id}-r0")  # the earlier stages ran, this one did not
    assert (workdir / "env").exists() == _ran(stage, "prepare")
    assert (markers / "before-serve-0").exists() == _ran(stage, "before_serve")
    assert (workdir / "hub-mounts.txt").exists() == _ran(stage, "stage_mounts")
    assert bool(local_containers(run_id)) == _ran(stage, "start")
    assert run_record(lair_home, run_id)["nodes"][0]["started"] == _ran(stage, "start")
    rc, err = signal_and_wait(proc, sig)
    assert rc == 130, err
    assert f"{sig.name}: stopping" in err and "launch interrupted: rolling back" in err, err
    assert run_record(lair_home, run_id)["state"] == "failed"
    assert_after_stop_ran(markers, (0,))
    assert_clean(lair_home, run_id, docker=True)
