"""The Slurm rendering of a plan (no Slurm needed): sbatch resources, apptainer and pyxis arguments
from the container plan, the docker step script (run with bash), and ``lair cluster add --slurm``."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lair.cli import main
from lair.errors import ConfigError, LaunchError
from lair.inventory import Node, load_inventory
from lair.launch.resolve import Request, prepare
from lair.plan.sbatch import (
    REAP_GRACE_S,
    SlurmJobSettings,
    apptainer_argv,
    epilogue_script,
    heterogeneous,
    main_script,
    node_scripts,
    pyxis_options,
    sbatch_options,
)
from lair.recipe import load_recipe

RECIPE = """
engine = "vllm"
docker_image = "vllm/vllm-openai:v0.11.0"
model = "/models/qwen"
required_nodes = 2
tensor_parallel_size = 2
distributed_backend = "mp"
gpus = "all"
memory_limit = "9g"
cpus = 5.5
before_serve = ["echo hi"]
after_stop = [{ run = "echo bye", on_failure = "warn" }]

[[extra_mounts]]
host = "/srv/models"
container = "/models"
read_only = true

[[extra_mounts]]
host = "/srv/cache"
container = "/root/.cache"

[meta.hardware]
gpu_count = 4
"""

JOB = "/jobs/run1"
SETTINGS = SlurmJobSettings(partition="gpu", account="lab", time_limit="01:00:00")


def _plan(tmp_path: Path, text: str = RECIPE) -> tuple[object, object]:
    path = tmp_path / "r.toml"
    path.write_text(text)
    nodes = [Node(name="c1", address="10.0.0.1", rank=0), Node(name="c2", address="10.0.0.2", rank=1)]
    prep = prepare(Request(recipe=str(path), run_id="run1", place=lambda _r, _id: nodes), lease=False)
    return prep.plan, load_recipe(path)


def test_sbatch_options_from_the_recipe_resources(tmp_path: Path) -> None:
    _, r = _plan(tmp_path)
    # 9g = 9216 MiB; 5.5 cpus round up; gpu_count 4 over 2 nodes = gpu:2 per node
    assert sbatch_options(r, SETTINGS) == [  # type: ignore[arg-type]
        "--nodes=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=6",
        "--mem=9216M",
        "--gres=gpu:2",
        "--time=01:00:00",
        "--partition=gpu",
        "--account=lab",
    ]
    assert "--gres=gpu:8" in sbatch_options(r, SlurmJobSettings(gres_per_node="gpu:8"))  # type: ignore[arg-type]


def test_apptainer_and_pyxis_arguments_from_the_container_plan(tmp_path: Path) -> None:
    plan, r = _plan(tmp_path)
    head = plan.nodes[0]  # type: ignore[attr-defined]
    cmd = ["vllm", "serve", "/models/qwen"]
    assert apptainer_argv(plan, r, head, cmd) == [  # type: ignore[arg-type]
        "apptainer",
        "exec",
        "--cleanenv",
        "--env-file",
        "/tmp/lair-run1-r0/env",
        "--nv",
        "--bind",
        "/srv/models:/models:ro",
        "--bind",
        "/srv/cache:/root/.cache",
        "docker://vllm/vllm-openai:v0.11.0",
        "vllm",
        "serve",
        "/models/qwen",
    ]
    assert pyxis_options(plan, r, JOB) == [  # type: ignore[arg-type]
        "--container-image=vllm/vllm-openai:v0.11.0",
        "--container-mounts=/srv/models:/models:ro,/srv/cache:/root/.cache,/jobs/run1:/jobs/run1,"
        "/tmp/lair-run1-r0:/tmp/lair-run1-r0,/tmp/lair-run1-r1:/tmp/lair-run1-r1",
        "--no-container-mount-home",
    ]


@pytest.mark.parametrize("container", ["docker", "apptainer", "enroot"])
def test_every_script_parses_and_wires_its_rank(tmp_path: Path, container: str) -> None:
    plan, r = _plan(tmp_path)
    scripts, copies = node_scripts(plan, r, SlurmJobSettings(container=container), JOB)  # type: ignore[arg-type]
    assert sorted(scripts) == [
        "node.sh",
        "r0/after_stop.sh",
        "r0/before_serve.sh",
        "r0/serve.sh",
        "r1/after_stop.sh",
        "r1/before_serve.sh",
        "r1/serve.sh",
    ]
    assert copies == {}
    opts = sbatch_options(r, SETTINGS)  # type: ignore[arg-type]
    texts = [*scripts.values(), main_script(JOB, 2, "lair-run1", opts), epilogue_script(JOB, 2, "e", opts)]
    for text in texts:
        res = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=10)
        assert res.returncode == 0, (res.stderr, text)
    assert "--node-rank 1 --master-addr 10.0.0.1" in scripts["r1/serve.sh"]
    assert "install -m 600 /jobs/run1/r0/env /tmp/lair-run1-r0/env" in scripts["r0/before_serve.sh"]
    assert "hook 'hook: echo bye' warn 600" in scripts["r1/after_stop.sh"]


def test_main_script_steps_per_role() -> None:
    text = main_script(JOB, 3, "lair-run1", ["--nodes=3"])
    assert "#SBATCH --nodes=3" in text and "#SBATCH --output=/jobs/run1/logs/%x-%j.out" in text
    assert "srun --relative=0 --nodes=3 --ntasks=3 --ntasks-per-node=1" in text  # before_serve: all
    assert "srun --relative=0 --nodes=1 --ntasks=1 --ntasks-per-node=1" in text  # serve: the head
    assert "srun --relative=1 --nodes=2 --ntasks=2 --ntasks-per-node=1" in text  # serve: the workers


def test_head_and_workers_that_differ_make_a_heterogeneous_job(tmp_path: Path) -> None:
    plan, r = _plan(tmp_path)  # vLLM mp: the head serves the API, the worker runs --headless
    assert heterogeneous(plan)  # type: ignore[arg-type]
    text = main_script(JOB, 3, "lair-run1", sbatch_options(r, SETTINGS), het=True)  # type: ignore[arg-type]
    res = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=10)
    assert res.returncode == 0, res.stderr
    header = [ln.removeprefix("#SBATCH ") for ln in text.splitlines() if ln.startswith("#SBATCH")]
    per_node = ["--ntasks-per-node=1", "--cpus-per-task=6", "--mem=9216M", "--gres=gpu:2", "--time=01:00:00"]
    per_node += ["--partition=gpu", "--account=lab"]
    assert header == [
        "--job-name=lair-run1",
        "--output=/jobs/run1/logs/%x-%j.out",
        "--nodes=1",
        *per_node,
        "hetjob",
        "--nodes=2",
        *per_node,
    ]
    # the nodes file: the head's component, then the workers'; every step names its component
    assert text.index("SLURM_JOB_NODELIST_HET_GROUP_0") < text.index("SLURM_JOB_NODELIST_HET_GROUP_1")
    steps = [ln.split(" bash ")[0] for ln in text.splitlines() if ln.startswith("srun")]
    common = "--ntasks-per-node=1 --kill-on-bad-exit=1"
    assert steps == [
        f"srun --het-group=0 --relative=0 --nodes=1 --ntasks=1 {common} --job-name=before_serve",
        f"srun --het-group=1 --relative=0 --nodes=2 --ntasks=2 {common} --job-name=before_serve",
        f"srun --het-group=0 --relative=0 --nodes=1 --ntasks=1 {common} --job-name=serve",
        f"srun --het-group=1 --relative=0 --nodes=2 --ntasks=2 {common} --job-name=serve",
    ]


def test_identical_ranks_stay_one_job(tmp_path: Path) -> None:
    custom = 'engine = "custom"\nruntime = "native"\nrequired_nodes = 2\npipeline_parallel_size = 2\n'
    custom += 'entrypoint = ["sh", "-c", "exec x"]\n'
    plan, _ = _plan(tmp_path, custom)
    assert not heterogeneous(plan)  # type: ignore[arg-type]
    text = main_script(JOB, 2, "lair-run1", ["--nodes=2"], het=False)
    assert "hetjob" not in text and "--het-group" not in text and "HET_GROUP" not in text
    one = main_script(JOB, 1, "lair-run1", ["--nodes=1"], het=True)  # one node: never a hetjob
    assert "hetjob" not in one and "--het-group" not in one


def test_after_stop_ends_what_the_run_left_on_the_node(tmp_path: Path) -> None:
    """after_stop.sh run with bash: processes of the run (by their LAIR_RUN_ID) that outlived the job
    are ended, one ignoring TERM by KILL once the (here shortened) grace has passed; another run's
    process is left alone."""
    native = 'engine = "custom"\nruntime = "native"\nentrypoint = ["sh", "-c", "exec x"]\n'
    plan, r = _plan(tmp_path, native)
    grace = 1.5
    settings = SlurmJobSettings(container="none", reap_grace_s=grace)
    script = node_scripts(plan, r, settings, JOB)[0]["r0/after_stop.sh"]  # type: ignore[arg-type]

    def spawn(run_id: str, cmd: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "LAIR_RUN_ID": run_id}
        return subprocess.Popen(["sh", "-c", cmd], env=env, start_new_session=True)

    polite, stubborn = (
        spawn("run1", "exec sleep 300"),
        spawn("run1", "trap '' TERM; while :; do sleep 0.1; done"),
    )
    other = spawn("run10", "exec sleep 300")
    try:
        env = {k: v for k, v in os.environ.items() if k != "LAIR_RUN_ID"}
        t0 = time.monotonic()
        res = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "lair: stopping processes of the run left on" in res.stdout
        assert str(polite.pid) in res.stdout and str(stubborn.pid) in res.stdout
        assert str(other.pid) not in res.stdout
        assert polite.wait(timeout=5) == -signal.SIGTERM and stubborn.wait(timeout=5) == -signal.SIGKILL
        took = time.monotonic() - t0
        assert other.poll() is None and grace <= took < REAP_GRACE_S  # KILL only after the grace
    finally:
        for p in (polite, stubborn, other):
            p.kill()
            p.wait()


def test_after_stop_waits_the_default_grace_unless_told(tmp_path: Path) -> None:
    """The default grace stays 10 s: 100 polls of 0.1 s before KILL; a shorter one polls fewer."""
    native = 'engine = "custom"\nruntime = "native"\nentrypoint = ["sh", "-c", "exec x"]\n'
    plan, r = _plan(tmp_path, native)

    def reap_line(settings: SlurmJobSettings) -> str:
        script = node_scripts(plan, r, settings, JOB)[0]["r0/after_stop.sh"]  # type: ignore[arg-type]
        return next(line for line in script.splitlines() if line.startswith("reap "))

    assert reap_line(SlurmJobSettings(container="none")) == "reap run1 100 || status=$?"
    assert reap_line(SlurmJobSettings(container="none", reap_grace_s=0.25)) == "reap run1 3 || status=$?"


def test_a_node_given_to_two_ranks_is_refused() -> None:
    from lair.launch.slurm.job import _distinct
    from lair.launch.slurm.jobs import SlurmJob

    job = SlurmJob(JOB, 12)
    assert _distinct(job, ["n1", "n2", "n3"]) == ["n1", "n2", "n3"]
    with pytest.raises(LaunchError, match="job 12: Slurm gave n2 to more than one rank"):
        _distinct(job, ["n2", "n1", "n2"])


def test_docker_step_runs_in_the_foreground_and_term_stops_the_container(tmp_path: Path) -> None:
    """serve.sh run by bash with a recording ``docker`` on PATH: ``run`` without ``-d``; TERM on the
    step -> ``docker stop`` of the run's container."""
    plan, r = _plan(tmp_path)
    scripts, _ = node_scripts(plan, r, SlurmJobSettings(container="docker"), JOB)  # type: ignore[arg-type]
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    pid = tmp_path / "run.pid"  # the fake's "stop" ends its "run", as the real client ends
    fake = (
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        f'case "$1" in run) echo $$ > {pid}; exec sleep 30 ;; stop) kill "$(cat {pid})" ;; esac\n'
    )
    (bin_dir / "docker").write_text(fake)
    (bin_dir / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.Popen(["bash", "-c", scripts["r0/serve.sh"]], env=env)
    deadline = time.monotonic() + 10
    while not (calls.exists() and calls.read_text().startswith("run ")) and time.monotonic() < deadline:
        time.sleep(0.05)
    run_line = calls.read_text().splitlines()[0]
    assert " -d " not in run_line and "--name lair-run1-r0" in run_line
    assert "--env-file /tmp/lair-run1-r0/env" in run_line and "vllm/vllm-openai:v0.11.0" in run_line
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    assert calls.read_text().splitlines()[1] == "stop --time 30 lair-run1-r0"


def test_container_recipe_on_a_native_only_cluster_is_refused(tmp_path: Path) -> None:
    plan, r = _plan(tmp_path)
    with pytest.raises(ConfigError, match="container = none"):
        node_scripts(plan, r, SlurmJobSettings(container="none"), JOB)  # type: ignore[arg-type]


def test_cluster_add_slurm(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--partition", "gpu", "--account", "lab", "--gres-per-node", "gpu:4", "--container", "enroot"]
    assert main(["cluster", "add", "hpc", "--slurm", *args, "--time", "02:00:00"]) == 0
    c = load_inventory().get("hpc")
    assert c.kind == "slurm" and c.nodes == [] and c.slurm is not None
    assert (c.slurm.partition, c.slurm.account, c.slurm.gres_per_node) == ("gpu", "lab", "gpu:4")
    assert (c.slurm.container, c.slurm.time_limit) == ("enroot", "02:00:00")
    assert main(["cluster", "add", "both", "--slurm", "--node", "address=10.0.0.1"]) == 1
    assert "give --node SPEC (one per node) or --slurm" in capsys.readouterr().err


def test_lair_plan_on_a_slurm_cluster_shows_placeholders_and_the_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "add", "hpc", "--slurm", "--partition", "gpu", "--time", "01:00:00"]) == 0
    path = tmp_path / "r.toml"
    path.write_text(RECIPE)
    capsys.readouterr()
    assert main(["plan", str(path), "--cluster", "hpc"]) == 0
    out = capsys.readouterr()
    assert "node slurm-node0 (slurm-node0) rank 0" in out.out and "node slurm-node1" in out.out
    assert "Slurm cluster hpc: the nodes are placeholders until the job runs" in out.err
    assert "#SBATCH --nodes=2" not in out.err  # vLLM's head and headless worker: one component each
    assert out.err.count("#SBATCH --nodes=1") == 2 and "#SBATCH hetjob" in out.err
    for line in (
        "#SBATCH --gres=gpu:2",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=01:00:00",
    ):
        assert line in out.err
