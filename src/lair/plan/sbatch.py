"""A plan as Slurm batch jobs: pure rendering, no Slurm needed (``lair.launch.slurm`` submits).

    sbatch_options(recipe, settings) -> [str]       --nodes, --gres, --mem, --cpus-per-task, --time ...
    heterogeneous(plan) -> bool                     head and workers run different commands
    main_script(job_dir, nnodes, ..., het=) -> str  the main job (submitted before the nodes are known)
    epilogue_script(job_dir, nnodes) -> str         after_stop + cleanup, a job run afterany the main one
    node_scripts(plan, recipe, settings, job_dir) -> {relative path: text}   per rank, per stage

The main job waits for ``JOB/go``: lair writes the plan's per-node scripts there once Slurm has
allocated the nodes (their names and addresses become the plan's nodes). Then, as job steps:

    step "before_serve"   every node: run folder + env-file, before_serve hooks, mount staging
    step "serve" x roles  the head (``--relative=0``), then the workers (``--relative=1``): the main
                          process in the foreground (a container: ``docker run`` without ``-d``,
                          ``apptainer exec``, or srun's pyxis ``--container-*`` options)

When the head and the workers run different commands (vLLM's API server and ``--headless``
workers, a Ray head and Ray workers), the main job is a heterogeneous job instead: component 0 is
the head's node, component 1 the workers' (``#SBATCH hetjob``), and every step names its
component (``srun --het-group=K``); the nodes file lists component 0's node, then component 1's.
The components get the same resources: a recipe gives one set for every node. When every rank runs
the same command (a ``custom`` engine told its rank by ``LAIR_NODE_RANK``) it stays one job.

A job that Slurm cancelled cannot start new steps, so ``after_stop`` (with the container stop, the
end of any process of the run still on the node, and the run folder's removal) runs as the steps of
a second job, submitted with ``--dependency=afterany`` on
the same nodes: it runs however the main job ended (stopped, failed, cancelled, out of time).

Everything a step says goes to ``JOB/logs/<stage>-r<rank>.log``; each stage leaves its exit code in
``JOB/status/<stage>-r<rank>.rc`` and the batch script its verdict in ``JOB/status/main``.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from lair.errors import ConfigError
from lair.plan.resources import gpus_per_node
from lair.plan.steps import NodePlan, Plan, Stage, Step

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = [
    "Container",
    "SlurmJobSettings",
    "apptainer_argv",
    "epilogue_script",
    "heterogeneous",
    "main_script",
    "node_scripts",
    "pyxis_options",
    "sbatch_options",
]

Container = Literal["docker", "apptainer", "enroot", "none"]
PLAN_WAIT_S = 300  # the main job gives lair this long to write the plan once it runs
REAP_GRACE_S = 10.0  # after_stop: a leftover process of the run gets this long after TERM, then KILL


@dataclass(frozen=True)
class SlurmJobSettings:
    """The cluster's Slurm settings that shape the jobs (lair.inventory's ``[clusters.X.slurm]``)."""

    partition: str | None = None
    account: str | None = None
    gres_per_node: str | None = None  # e.g. "gpu:4"; default from the recipe's GPUs
    container: Container = "docker"
    time_limit: str | None = None  # sbatch --time
    reap_grace_s: float = REAP_GRACE_S  # after_stop's TERM-to-KILL grace for the run's leftovers


# ---- sbatch options ------------------------------------------------------------------------------
def sbatch_options(r: Recipe, s: SlurmJobSettings) -> list[str]:
    """The main job's resources: one task per node, the recipe's per-node cpus, memory and GPUs."""
    opts = [f"--nodes={r.required_nodes}", "--ntasks-per-node=1"]
    if r.cpus is not None:
        opts.append(f"--cpus-per-task={math.ceil(r.cpus)}")
    if r.memory_limit_bytes:
        opts.append(f"--mem={math.ceil(r.memory_limit_bytes / 2**20)}M")
    gpus = gpus_per_node(r)
    gres = s.gres_per_node or (f"gpu:{gpus}" if gpus else None)
    if gres:
        opts.append(f"--gres={gres}")
    if s.time_limit:
        opts.append(f"--time={s.time_limit}")
    if s.partition:
        opts.append(f"--partition={s.partition}")
    if s.account:
        opts.append(f"--account={s.account}")
    return opts


# ---- the two batch scripts -----------------------------------------------------------------------
def _header(name: str, job_dir: str, components: Sequence[Sequence[str]]) -> list[str]:
    """The #SBATCH lines: the job's name and output, then each component's options (``hetjob``
    between components)."""
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --output={job_dir}/logs/%x-%j.out"]
    for i, options in enumerate(components):
        lines += ["#SBATCH hetjob"] * bool(i) + [f"#SBATCH {o}" for o in options]
    return [*lines, f"D={shlex.quote(job_dir)}", 'mkdir -p "$D/status" "$D/logs"']


def _step(stage: str, rel: int, nodes: int, extra: str = "", group: int | None = None) -> str:
    """srun of ``node.sh STAGE`` on ``nodes`` nodes from relative node ``rel`` (one task each), of
    heterogeneous component ``group`` when given."""
    het = f"--het-group={group} " if group is not None else ""
    return (
        f"srun {het}--relative={rel} --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 "
        f"--kill-on-bad-exit=1 {extra}"
        f'--job-name={stage} bash "$D/node.sh" {stage}'
    )


def heterogeneous(plan: Plan) -> bool:
    """Whether the head and the workers run different commands (a heterogeneous job then)."""

    def runs(n: NodePlan) -> list[list[str]]:
        return [s.command or s.argv or [] for s in n.steps if s.stage in (Stage.START, Stage.SERVE)]

    return any(runs(w) != runs(plan.head) for w in plan.nodes[1:])


def _components(options: Sequence[str], nnodes: int) -> list[list[str]]:
    """The head's component (1 node) and the workers' (the rest), each with the per-node options."""
    rest = [o for o in options if not o.startswith("--nodes=")]
    return [["--nodes=1", *rest], [f"--nodes={nnodes - 1}", *rest]]


_NODES = 'scontrol show hostnames "${}" >> "$D/status/nodes.tmp"'


def _serve_steps(nnodes: int, extra: str, het: bool) -> list[str]:
    g0, g1 = (0, 1) if het else (None, None)
    lines = [_step("serve", 0, 1, extra, g0) + " &", "head=$!"]
    if nnodes > 1:
        lines += [_step("serve", 0 if het else 1, nnodes - 1, extra, g1) + " &", "workers=$!"]
        return [*lines, "wait -n $head $workers; rc=$?", "kill $head $workers 2>/dev/null; wait"]
    return [*lines, "wait $head; rc=$?"]


def main_script(
    job_dir: str, nnodes: int, name: str, options: Sequence[str], serve_extra: str = "", het: bool = False
) -> str:
    """The main job: wait for the plan, the before_serve step, one serve step per node role; ``het``:
    a heterogeneous job of the head's component and the workers'."""
    het = het and nnodes > 1
    lines = _header(name, job_dir, _components(options, nnodes) if het else [options])
    if het:
        nodes = [
            _NODES.format("SLURM_JOB_NODELIST_HET_GROUP_0"),
            _NODES.format("SLURM_JOB_NODELIST_HET_GROUP_1"),
        ]
        before = [
            _step("before_serve", 0, 1, group=0) + " & b0=$!",
            _step("before_serve", 0, nnodes - 1, group=1) + " & b1=$!",
            "wait $b0; rc=$?; wait $b1; rc1=$?; [ $rc = 0 ] && rc=$rc1",
        ]
    else:
        nodes = [_NODES.format("SLURM_JOB_NODELIST")]
        before = [_step("before_serve", 0, nnodes) + "; rc=$?"]
    lines += [
        'verdict() { echo "$1" > "$D/status/main.tmp"; mv "$D/status/main.tmp" "$D/status/main"; }',
        'rm -f "$D/status/nodes.tmp"',
        *nodes,
        'mv "$D/status/nodes.tmp" "$D/status/nodes"',
        f"for _ in $(seq {PLAN_WAIT_S * 5}); do",
        '  [ -e "$D/go" ] && break; [ -e "$D/abort" ] && { verdict "aborted"; exit 3; }; sleep 0.2',
        "done",
        f'[ -e "$D/go" ] || {{ verdict "no plan from lair after {PLAN_WAIT_S}s"; exit 3; }}',
        *before,
        'rm -f "$D"/r*/env "$D"/r*/secrets',  # each node installed its own copy
        '[ $rc = 0 ] || { verdict "before_serve failed (exit $rc)"; exit 1; }',
        *_serve_steps(nnodes, serve_extra, het),
        'verdict "serve ended (exit $rc)"',
        "exit $rc",
    ]
    return "\n".join(lines) + "\n"


def epilogue_script(job_dir: str, nnodes: int, name: str, options: Sequence[str]) -> str:
    """after_stop + cleanup on every node of the main job, whatever became of it."""
    lines = _header(name, job_dir, [options])
    lines += [
        _step("after_stop", 0, nnodes),
        'rc=$?; echo "$rc" > "$D/status/epilogue.tmp"; mv "$D/status/epilogue.tmp" "$D/status/epilogue"',
        "exit $rc",
    ]
    return "\n".join(lines) + "\n"


# ---- per-node scripts ------------------------------------------------------------------------------
_LIB = r"""set -u
hook() {  # NAME ON_FAILURE TIMEOUT ARGV...: a hook with its timeout; "warn" goes on after a failure
  name=$1; onf=$2; t=$3; shift 3
  echo "lair: $name"
  timeout -k 5 "$t" "$@"; rc=$?
  [ $rc = 0 ] && return 0
  echo "lair: $name failed (exit $rc)" >&2
  [ "$onf" = warn ] && return 0
  return $rc
}"""

_NODE_SH = r"""#!/bin/bash
# node.sh STAGE: this node's script of STAGE (the rank comes from the node's place in the job)
D=$(cd "$(dirname "$0")" && pwd)
rank=$(grep -nxF "$SLURMD_NODENAME" "$D/status/nodes" | cut -d: -f1)
rank=$((rank - 1))
exec >> "$D/logs/$1-r$rank.log" 2>&1
bash "$D/r$rank/$1.sh"; rc=$?
echo "$rc" > "$D/status/$1-r$rank.rc"
exit $rc
"""


def _hook(s: Step) -> str:
    assert s.argv is not None
    return f"hook {shlex.quote(s.name)} {s.on_failure} {s.timeout_s or 600:g} {shlex.join(s.argv)} || exit $?"


def _files(job_dir: str, n: NodePlan) -> tuple[list[str], dict[str, str]]:
    """Uploads: lair copies each source into ``JOB/rN/files/``; the node installs it at its path."""
    lines, copies = [], {}
    for i, s in enumerate(x for x in n.steps if x.kind == "upload"):
        assert s.source and s.path
        rel = f"r{n.rank}/files/{i}-{s.source.rsplit('/', 1)[-1]}"
        copies[rel] = s.source
        dest = s.path.rsplit("/", 1)[0]
        lines += [
            f"mkdir -p {shlex.quote(dest)}",
            f"install -m {s.mode or '0755'} {shlex.quote(f'{job_dir}/{rel}')} {shlex.quote(s.path)}",
        ]
    return lines, copies


def _pull(s: Step) -> list[str]:
    """The image on the node, by the plan's pull policy (docker under Slurm)."""
    assert s.argv is not None
    have = f"{s.argv[0]} image inspect {shlex.quote(s.argv[-1])} >/dev/null 2>&1"
    if s.pull == "always":
        return [shlex.join(s.argv)]
    if s.pull == "never":
        return [
            f"{have} || {{ echo 'lair: image {s.argv[-1]} is not on this node (pull = never)' >&2; exit 1; }}"
        ]
    return [f"{have} || {shlex.join(s.argv)}"]


def _before_serve(job_dir: str, n: NodePlan, container: Container) -> tuple[str, dict[str, str]]:
    lines = [_LIB, "set -e", f"mkdir -p -m 700 {shlex.quote(n.workdir)}"]
    lines.append(f"install -m 600 {shlex.quote(f'{job_dir}/r{n.rank}/env')} {shlex.quote(n.env_file)}")
    if n.secrets_file:
        src = f"{job_dir}/r{n.rank}/secrets"
        lines.append(f"install -m 600 {shlex.quote(src)} {shlex.quote(n.secrets_file)}")
    files, copies = _files(job_dir, n)
    lines += files
    for s in n.stage(Stage.PREPARE):
        if s.kind == "script":  # e.g. the engine's network interface, found on the node
            lines.append(f"sh -c {shlex.quote(s.script or '')}")
        elif s.kind == "pull" and container == "docker":
            lines += _pull(s)
    lines.append("set +e")
    lines += [_hook(s) for s in n.stage(Stage.BEFORE_SERVE) if s.kind == "exec"]
    lines += [f"sh -c {shlex.quote(s.script or '')} || exit $?" for s in n.stage(Stage.STAGE_MOUNTS)]
    return "\n".join(lines) + "\n", copies


def _manifest_lines(manifest: str | None, flag: str) -> list[str]:
    lines = ["extra=()"]
    for path in (manifest or "").split(";"):
        if path:
            lines += [
                "while IFS=$'\\t' read -r h c; do",
                '  case "$h" in ""|\\#*) continue ;; esac',
                f'  extra+=({flag} "$h:$c:ro")',
                f"done < {shlex.quote(path)}",
            ]
    return lines


def _docker_serve(n: NodePlan, start: Step) -> list[str]:
    """``docker run`` in the foreground (Slurm tracks the client); TERM stops the container."""
    assert start.argv is not None and n.container
    argv = [a for a in start.argv if a != "-d"]
    i = argv.index("--env-file") + 2
    i += 2 if argv[i] == "--entrypoint" else 0
    lines = _manifest_lines(start.manifest, "-v")
    stop = shlex.join([argv[0], "stop", "--time", "30", n.container])
    lines += [
        f"trap '{stop} >/dev/null 2>&1' TERM INT",
        f'{shlex.join(argv[:i])} "${{extra[@]}}" {shlex.join(argv[i:])} &',
        "pid=$!",
    ]
    for s in n.stage(Stage.SERVE):  # Ray: the serve command once this node's container runs
        assert s.argv is not None
        running = f"{argv[0]} inspect -f '{{{{.State.Running}}}}' {n.container} 2>/dev/null"
        lines += [
            f'until [ "$({running})" = true ]; do',
            "  kill -0 $pid 2>/dev/null || break; sleep 0.5",
            "done",
            shlex.join(s.argv),
        ]
    return [*lines, "wait $pid; rc=$?", "wait $pid 2>/dev/null; exit $rc"]


def apptainer_argv(plan: Plan, r: Recipe, n: NodePlan, command: Sequence[str]) -> list[str]:
    """``apptainer exec`` from the container plan: image, env-file, mounts, GPUs/devices, command."""
    image = plan.run.image or ""
    ref = (
        image if ("://" in image or image.endswith(".sif") or image.startswith("/")) else f"docker://{image}"
    )
    argv = ["apptainer", "exec", "--cleanenv", "--env-file", n.env_file]
    if r.gpus:
        argv.append("--nv")
    for m in r.extra_mounts:
        argv += ["--bind", f"{m.host}:{m.container}{':ro' if m.read_only else ''}"]
    for d in r.devices:
        argv += ["--bind", d]
    return [*argv, ref, *command]


def pyxis_options(plan: Plan, r: Recipe, job_dir: str) -> list[str]:
    """srun options of enroot through pyxis: the image, the mounts (the job folder included)."""
    image = (plan.run.image or "").replace("docker://", "")
    mounts = [f"{m.host}:{m.container}{':ro' if m.read_only else ''}" for m in r.extra_mounts]
    mounts += [f"{job_dir}:{job_dir}", *sorted({f"{n.workdir}:{n.workdir}" for n in plan.nodes})]
    return [
        f"--container-image={image}",
        f"--container-mounts={','.join(mounts)}",
        "--no-container-mount-home",
    ]


def _native_serve(n: NodePlan, command: Sequence[str]) -> list[str]:
    """The env-file loaded, then the command in the foreground (it gets the step's signals)."""
    load = f"set -a; . {shlex.quote(n.env_file)}; set +a"
    return [f"cd {shlex.quote(n.workdir)}", load, f"exec {shlex.join(command)}"]


def _serve(plan: Plan, r: Recipe, n: NodePlan, container: Container) -> str:
    start = next(s for s in n.stage(Stage.START) if s.kind == "start")
    command = start.command or []
    if plan.run.runtime == "native":
        body = _native_serve(n, command)
    elif container == "docker":
        body = _docker_serve(n, start)
    elif container == "apptainer":
        body = [f"cd {shlex.quote(n.workdir)}", f"exec {shlex.join(apptainer_argv(plan, r, n, command))}"]
    elif container == "enroot":
        body = _native_serve(n, command)  # already inside the container (srun --container-image)
    else:
        raise ConfigError(
            f"the recipe runs in a container ({plan.run.runtime}) and the cluster says container = none",
            hint="set the cluster's container (docker, apptainer, enroot) or use a native recipe",
        )
    return "\n".join(["set -u", *body]) + "\n"


_REAP = r"""# the run's processes left on this node: every one whose environment says LAIR_RUN_ID=RUN (a
# server's children that outlived it escape Slurm's process tracking once they are orphaned)
left() { grep -lsxzF "LAIR_RUN_ID=$1" /proc/[0-9]*/environ | cut -d/ -f3 | grep -vx "$$" | tr '\n' ' '; }
reap() {  # RUN TICKS: TERM what is left, KILL it after TICKS x 0.1 s, fail if anything survives
  pids=$(left "$1"); [ -n "$pids" ] || return 0
  echo "lair: stopping processes of the run left on $(hostname): $pids"
  kill -TERM $pids 2>/dev/null
  for _ in $(seq "$2"); do [ -n "$(left "$1")" ] || return 0; sleep 0.1; done
  kill -KILL $(left "$1") 2>/dev/null
  for _ in $(seq 50); do [ -n "$(left "$1")" ] || return 0; sleep 0.1; done
  echo "lair: processes $(left "$1") of the run survived SIGKILL" >&2; return 1
}"""


def _after_stop(n: NodePlan, grace_s: float) -> str:
    lines = [_LIB, _REAP, "status=0"]
    for s in n.stage(Stage.STOP):
        if s.argv:
            lines.append(f"{shlex.join(s.argv)} >/dev/null 2>&1")
    ticks = max(1, math.ceil(grace_s * 10))  # reap polls every 0.1 s
    lines.append(f"reap {shlex.quote(n.lair_env['LAIR_RUN_ID'])} {ticks} || status=$?")
    for s in n.stage(Stage.AFTER_STOP):
        lines.append(_hook(s).replace("|| exit $?", "|| status=$?"))
    lines += [f"rm -rf {shlex.quote(n.workdir)}", "exit $status"]
    return "\n".join(lines) + "\n"


def _check(plan: Plan, container: Container) -> None:
    manifests = [s for n in plan.nodes for s in n.stage(Stage.START) if s.manifest]
    if manifests and plan.run.runtime != "native" and container in ("enroot", "apptainer"):
        raise ConfigError(
            f"per-file mount manifests are read at start-up, which {container} under Slurm cannot take",
            hint="list the mounts in extra_mounts, or use container = docker",
        )


def node_scripts(
    plan: Plan, r: Recipe, s: SlurmJobSettings, job_dir: str
) -> tuple[dict[str, str], dict[str, str]]:
    """``{relative path: text}`` of every node script, and ``{relative path: source}`` files to copy."""
    _check(plan, s.container)
    out = {"node.sh": _NODE_SH}
    copies: dict[str, str] = {}
    for n in plan.nodes:
        before, files = _before_serve(job_dir, n, s.container)
        copies.update(files)
        out[f"r{n.rank}/before_serve.sh"] = before
        out[f"r{n.rank}/serve.sh"] = _serve(plan, r, n, s.container)
        out[f"r{n.rank}/after_stop.sh"] = _after_stop(n, s.reap_grace_s)
    return out, copies
