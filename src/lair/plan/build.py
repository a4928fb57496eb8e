"""``plan(recipe, nodes, ...) -> Plan``: every step of a run, per node, with no I/O on any node.

The recipe is rendered (placeholders from the rig), checked against the hosts' capabilities and
trust, then each node gets, in stage order: its run folder and env-file, the ``before_serve``
hooks, mount staging, the main process (container or native), readiness, stop, ``after_stop`` and
cleanup. Env values stay out of the plan's data (``run.env`` shows secrets as ``***``); launch
gets them from :meth:`Plan.env_values`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from lair.errors import AllocationError, CapabilityError, ConfigError, LaunchError
from lair.plan.capabilities import apply_capabilities, runtime_ulimits
from lair.plan.container import ContainerSpec, run_argv
from lair.plan.gpus import cuda_visible_devices, default_gpus, gpu_args
from lair.plan.mounts import hub_mount, staging_script
from lair.plan.secrets import SECRET_WRAP, SECRETS_MOUNT, move_secret_args
from lair.plan.steps import DETECT, NodePlan, Plan, RunInfo, Stage, Step, Target
from lair.plan.trust import Acceptance, check_trust, trust_view

if TYPE_CHECKING:
    from lair.engines import NodeCommand
    from lair.recipe import Hook, Recipe
    from lair.rig import Capabilities, Rig

__all__ = ["DEFAULT_MASTER_PORT", "REDACTED", "node_env", "plan"]

DEFAULT_MASTER_PORT = 29501  # vLLM's ParallelConfig.master_port default
REDACTED = "***"
STOP_GRACE_S = 30
PULL_TIMEOUT_S = 3600.0
NATIVE_START = 'set -a; . "$0"; set +a; exec "$@"'  # load the env-file, then become the command


def _lair_env(run_id: str, t: Target, n: int, master: str, master_port: int, port: int) -> dict[str, str]:
    """What every node's process and hooks are told about the run (never secret)."""
    return {
        "LAIR_RUN_ID": run_id,
        "LAIR_NODE_RANK": str(t.rank),
        "LAIR_NNODES": str(n),
        "LAIR_MASTER_ADDR": master,
        "LAIR_MASTER_PORT": str(master_port),
        "LAIR_ENGINE_PORT": str(port),
    }


def node_env(recipe: Recipe, lair_env: Mapping[str, str]) -> dict[str, str]:
    """The env-file content of one node: the recipe's env then the LAIR_* values."""
    env = dict(recipe.env)
    env.update(lair_env)
    for k, v in env.items():
        if "\n" in v or "\r" in v:
            raise ConfigError(f"env.{k}: a value may not contain a line break (env-files are line-based)")
    return env


def _hook_steps(
    stage: Stage,
    hooks: Sequence[Hook],
    workdir: str,
    env: Mapping[str, str],
    find: Callable[[str], Path | None],
) -> list[Step]:
    prefix = ["env", *(f"{k}={v}" for k, v in env.items())]
    steps: list[Step] = []
    for i, h in enumerate(hooks):
        if h.script:
            src = find(h.script)
            if src is None:
                raise ConfigError(
                    f"{stage.value}: no script named {h.script!r} in the script library",
                    hint="list them with `lair scripts`, or add one to the user scripts folder",
                )
            dest = f"{workdir}/hooks/{stage.value}-{i}-{src.name}"
            steps.append(
                Step(
                    stage=stage,
                    kind="upload",
                    name=f"copy {src.name}",
                    source=str(src),
                    path=dest,
                    mode="0755",
                )
            )
            argv = [*prefix, dest, *h.args]
            label = f"hook {h.script}"
        else:
            argv = [*prefix, "sh", "-c", h.run or ""]
            label = "hook: " + ((h.run or "").strip().splitlines() or [""])[0][:60]
        steps.append(
            Step(
                stage=stage,
                kind="exec",
                name=label,
                argv=argv,
                timeout_s=h.timeout_s,
                on_failure=h.on_failure,
            )
        )
    return steps


class _Ctx:
    """Everything the per-node builders share."""

    def __init__(
        self,
        recipe: Recipe,
        run: RunInfo,
        python: Callable[[Target], str],
        workroot: str,
        caps: Capabilities,
        pull_timeout_s: float = PULL_TIMEOUT_S,
    ) -> None:
        self.recipe, self.run, self.python, self.workroot = recipe, run, python, workroot
        self.caps, self.pull_timeout_s = caps, pull_timeout_s
        self.binary = "podman" if recipe.runtime == "podman" else "docker"
        self.peer_addr = ""  # rank 1's engine address: the head finds its interface toward it

    def gpus(self, t: Target) -> str | None:
        """This node's GPU selection: the inventory's for the node, else the run's."""
        sel = t.gpus or (self.run.gpus if self.recipe.runtime != "native" else self.recipe.gpus)
        if sel and sel != "none" and self.recipe.runtime != "native" and not self.caps.gpus:
            raise CapabilityError(
                f"the hosts cannot run this recipe as written:\n  gpus {sel} on {t.name}: "
                "the host has no GPU container runtime",
                hint='install the NVIDIA container toolkit (or CDI specs), or set gpus = "none" '
                "(the rig's [capabilities] gpus = false says there is none)",
            )
        return sel


def _secret_command(ctx: _Ctx, command: list[str], secrets_file: str | None) -> tuple[list[str], list[str]]:
    """(extra run flags, command): with secrets, the secrets file mounted and sourced before exec."""
    if not secrets_file:
        return [], command
    if not command:
        raise ConfigError(
            "secret env in a container needs an entrypoint: lair wraps it to load the secrets file",
            hint="give the recipe an entrypoint (the image's own command, written out)",
        )
    return ["-v", f"{secrets_file}:{SECRETS_MOUNT}:ro"], ["sh", "-c", SECRET_WRAP, "sh", *command]


def _start_steps(
    ctx: _Ctx, t: Target, cmd: NodeCommand, node: NodePlan, manifests: list[str]
) -> tuple[list[Step], str | None]:
    r, run = ctx.recipe, ctx.run
    if r.runtime == "native":
        argv = ["sh", "-c", NATIVE_START, node.env_file, *cmd.argv]
        step = Step(stage=Stage.START, kind="start", name="start process", argv=argv, command=cmd.argv)
        return [step], None
    name = f"lair-{run.run_id}-r{t.rank}"
    labels = {
        "lair.run": run.run_id,
        "lair.rank": str(t.rank),
        "lair.version": run.lair_version,
        "lair.recipe": run.name,
    }
    extra, command = _secret_command(ctx, cmd.argv, node.secrets_file)
    extra = gpu_args(node.gpus or "none", ctx.binary, ctx.caps) + extra
    argv = run_argv(r, ContainerSpec(ctx.binary, name, labels, node.env_file, command, extra))
    steps = [
        Step(
            stage=Stage.START,
            kind="start",
            name=f"{ctx.binary} run",
            argv=argv,
            manifest=";".join(manifests) or None,
            command=cmd.argv,
        )
    ]
    return steps, name


def _stop_steps(ctx: _Ctx, container: str | None) -> list[Step]:
    if container is None:
        return [Step(stage=Stage.STOP, kind="stop", name="stop process", timeout_s=STOP_GRACE_S)]
    b = ctx.binary
    return [
        Step(
            stage=Stage.STOP,
            kind="stop",
            name=f"{b} stop",
            argv=[b, "stop", "--time", str(STOP_GRACE_S), container],
        ),
        Step(stage=Stage.STOP, kind="stop", name=f"{b} rm", argv=[b, "rm", "-f", "-v", container]),
    ]


def _ready_step(ctx: _Ctx, t: Target, head: bool) -> Step:
    from lair.engines import get_engine

    r = ctx.recipe
    base = f"http://{_reach(t, r.host)}:{r.port}"
    urls = [base + r.health_path, base + "/v1/models"] if head else []
    key_env = get_engine(r.engine).api_key_env
    return Step(
        stage=Stage.READY,
        kind="ready",
        name="readiness" if head else "stays up",
        urls=urls,
        timeout_s=r.ready_timeout_s,
        auth_env=key_env if head and key_env in r.env else None,
    )


def _prepare_steps(ctx: _Ctx, node: NodePlan, env_names: list[str], nnodes: int) -> list[Step]:
    """Run folder + env-file(s), the port check on the head, the image pull."""
    r, run = ctx.recipe, ctx.run
    secret = sorted(run.secret_env) if node.secrets_file else []
    steps = [
        Step(
            stage=Stage.PREPARE,
            kind="env_file",
            name="run folder + env-file",
            path=node.env_file,
            mode="0600",
            env_names=[n for n in env_names if n not in secret],
        )
    ]
    if node.secrets_file:
        steps.append(
            Step(
                stage=Stage.PREPARE,
                kind="env_file",
                name="secrets file",
                path=node.secrets_file,
                mode="0600",
                env_names=secret,
                secrets=True,
            )
        )
    if node.rank == 0:
        ports = [r.port] + ([run.master_port] if nnodes > 1 else [])
        label = ", ".join(str(p) for p in ports)
        steps.append(Step(stage=Stage.PREPARE, kind="check", name=f"port {label} free", ports=ports))
    if r.runtime != "native":
        steps.append(
            Step(
                stage=Stage.PREPARE,
                kind="pull",
                name=f"image {r.docker_image} (pull {run.pull})",
                argv=[ctx.binary, "pull", r.docker_image or ""],
                pull=run.pull,
                timeout_s=ctx.pull_timeout_s,
            )
        )
    return steps


def _reach(t: Target, bind: str) -> str:
    if bind not in ("0.0.0.0", "::", ""):
        return bind
    return "127.0.0.1" if t.local else t.address


def _node(ctx: _Ctx, t: Target, n: int, find: Callable[[str], Path | None]) -> NodePlan:
    from lair.engines import Role, get_engine

    r, run = ctx.recipe, ctx.run
    workdir = f"{ctx.workroot}/lair-{run.run_id}-r{t.rank}"
    env_file = f"{workdir}/env"
    lair_env = _lair_env(run.run_id, t, n, run.master_addr, run.master_port, r.port)
    gpus = ctx.gpus(t)
    visible = cuda_visible_devices(gpus) if r.runtime == "native" and gpus else None
    if visible is not None and "CUDA_VISIBLE_DEVICES" not in r.env:
        lair_env["CUDA_VISIBLE_DEVICES"] = visible
    role = Role(
        t.rank, n, run.master_addr, run.master_port, t.engine_addr, t.interface, workdir, ctx.peer_addr
    )
    python = ctx.python(t) if r.runtime == "native" else "python3"  # a container has its own
    cmd = get_engine(r.engine).command(r, role, python)
    engine_env = {**cmd.env, **{k: DETECT + cmd.route_to for k in cmd.detect}}
    if r.runtime == "native" and cmd.argv and cmd.argv[0] in ("python", "python3"):
        cmd.argv[0] = ctx.python(t)  # the node's interpreter: lair's own on the local node
    hook_env = {**lair_env, "LAIR_PYTHON": ctx.python(t)}
    secrets_file = f"{workdir}/secrets" if r.runtime != "native" and run.secret_env else None
    node = NodePlan(
        name=t.name,
        address=t.address,
        rank=t.rank,
        role="head",
        local=t.local,
        would_take=t.would_take,
        workdir=workdir,
        env_file=env_file,
        secrets_file=secrets_file,
        gpus=gpus,
        lair_env=lair_env,
        engine_env=engine_env,
        steps=[],
    )
    steps = [
        *_prepare_steps(ctx, node, sorted({**node_env(r, lair_env), **engine_env}), n),
        *_detect_steps(cmd.detect, cmd.route_to, env_file),
        *_hook_steps(Stage.BEFORE_SERVE, r.before_serve, workdir, hook_env, find),
    ]
    manifests, hubs = [], [h for m in r.extra_mounts if (h := hub_mount(m))]
    if r.extra_mounts_manifest:
        manifests.append(r.extra_mounts_manifest)
    if hubs:
        manifests.append(f"{workdir}/hub-mounts.txt")
        steps.append(
            Step(
                stage=Stage.STAGE_MOUNTS,
                kind="script",
                name="stage hub files",
                script=staging_script(hubs, manifests[-1]),
            )
        )
    start, container = _start_steps(ctx, t, cmd, node, manifests)
    steps += start
    steps.append(_ready_step(ctx, t, t.rank == 0))
    steps += _stop_steps(ctx, container)
    steps += _hook_steps(Stage.AFTER_STOP, r.after_stop, workdir, hook_env, find)
    steps.append(Step(stage=Stage.CLEANUP, kind="cleanup", name="remove run folder", path=workdir))
    steps += [
        Step(stage=Stage.CLEANUP, kind="cleanup", name="remove engine scratch", path=p) for p in cmd.scratch
    ]
    return node.model_copy(update={"role": cmd.role, "container": container, "steps": steps})


DETECT_SCRIPT = """\
dev=$(ip -o route get {to} 2>/dev/null | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p')
[ -n "$dev" ] || {{ echo "lair: no route from $(hostname) to {to} (ip route get {to})" >&2; exit 1; }}
printf '{fmt}' {args} >> {env_file}
"""


def _detect_steps(names: Sequence[str], to: str, env_file: str) -> list[Step]:
    """A prepare step that finds the node's interface toward ``to`` and appends ``names`` with it to
    the env-file (when the cluster's node entry gives no ``interface``)."""
    if not names:
        return []
    fmt = "".join(f"{n}=%s\\n" for n in names)
    script = DETECT_SCRIPT.format(
        to=shlex.quote(to), fmt=fmt, args=" ".join('"$dev"' for _ in names), env_file=shlex.quote(env_file)
    )
    return [Step(stage=Stage.PREPARE, kind="script", name="find the engines' interface", script=script)]


def _check_engine(recipe: Recipe, where: str) -> None:
    """The engine rules of ``lair check`` (KV dtype names, Ray support): ConfigError on the first."""
    from lair.engines.rules import engine_issues

    for path, msg, hint, _code in engine_issues(recipe)[:1]:
        key = ".".join(str(p) for p in path)
        raise ConfigError(f"{where or 'the recipe'}: {key}: {msg}", hint=hint)


def _targets(recipe: Recipe, nodes: Sequence[Target]) -> list[Target]:
    if len(nodes) < recipe.required_nodes:
        raise AllocationError(
            f"the recipe needs {recipe.required_nodes} nodes, {len(nodes)} given",
            hint="give more hosts with --nodes H,H or a cluster with enough free ranks",
        )
    ts = sorted(nodes[: recipe.required_nodes], key=lambda t: t.rank)
    if recipe.required_nodes > 1 and not recipe.entrypoint:
        from lair.engines import get_engine

        if not get_engine(recipe.engine).multinode:
            raise LaunchError(
                f"engine {recipe.engine} does not span nodes by itself",
                hint="give the recipe an entrypoint that runs each node's role (it gets LAIR_NODE_RANK)",
            )
    return ts


def _secret_values(recipe: Recipe, rendered: Recipe, vals: Mapping[str, str], names: set[str]) -> list[str]:
    """Every resolved secret value: of secret placeholders and of secret env."""
    from lair.recipe.placeholders import resolve_values

    resolved = resolve_values(recipe.placeholders, dict(vals))
    out = [resolved[n] for n, p in recipe.placeholders.items() if p.type == "secret" and n in resolved]
    return out + [rendered.env[k] for k in names if rendered.env.get(k)]


def _check_no_secret_in(out: Plan, secrets: Sequence[str]) -> None:
    """A secret value left anywhere in the plan's data (a hook's arguments, the image) is refused."""
    for node in out.nodes:
        for step in node.steps:
            text = step.model_dump_json()
            if any(v and len(v) >= 4 and v in text for v in secrets):
                raise ConfigError(
                    f"a secret value would appear in the plan ({step.stage.value}: {step.name}): "
                    "lair keeps secrets out of command lines",
                    hint="read the secret from the environment in the hook or entrypoint instead",
                )


def _with_gpus(r: Recipe) -> Recipe:
    return r if r.runtime == "native" else r.model_copy(update={"gpus": default_gpus(r)})


def _check_image(r: Recipe) -> None:
    img = r.docker_image or ""
    if r.runtime != "native" and (img.startswith("-") or any(c.isspace() for c in img) or not img):
        raise ConfigError(f"docker_image: not an image reference: {img!r}", hint="repo/name:tag")


def plan(
    recipe: Recipe,
    nodes: Sequence[Target],
    *,
    run_id: str,
    rig: Rig | None = None,
    capabilities: Capabilities | None = None,
    drop_unsupported: bool = False,
    trusted: bool = True,
    acceptance: Acceptance | None = None,
    previous: Acceptance | None = None,
    source: str | None = None,
    recipe_path: str = "",
    values: Mapping[str, str] | None = None,
    python: Callable[[Target], str] | None = None,
    master_port: int = DEFAULT_MASTER_PORT,
    workroot: str = "/tmp",
    find_script: Callable[[str], Path | None] | None = None,
    pull: Literal["missing", "always", "never"] = "missing",
    pull_timeout_s: float = PULL_TIMEOUT_S,
) -> Plan:
    """The full plan of a run of ``recipe`` on ``nodes`` (the first ``required_nodes`` are taken).

    ``values`` (placeholder values) default to the rig's; ``capabilities`` to the rig's (else every
    flag is allowed); ``python`` gives each node's interpreter for engines started with Python;
    ``previous`` is the last acceptance of an untrusted recipe's source (its changes are shown);
    ``source`` is where it came from (an acceptance of another source does not count).
    Raises PlaceholderError, CapabilityError, TrustError, AllocationError, ConfigError.
    """
    from lair import __version__
    from lair.recipe import render_recipe, secret_env_names
    from lair.recipe.scripts import find_script as default_find
    from lair.rig import Capabilities

    vals = dict(values if values is not None else (rig.string_values() if rig else {}))
    rendered = render_recipe(recipe, vals, where=recipe_path or "the recipe")
    view = trust_view(recipe, vals)
    check_trust(view, trusted=trusted, acceptance=acceptance, previous=previous, source=source)
    rendered, moved = move_secret_args(recipe, rendered)
    rendered = _with_gpus(rendered.model_copy(update={"env": {**rendered.env, **moved}}))
    _check_image(rendered)
    caps = capabilities or (rig.capabilities if rig else Capabilities())
    rendered, dropped = apply_capabilities(rendered, caps, drop=drop_unsupported)
    added = runtime_ulimits(rendered, caps)
    rendered = rendered.model_copy(update={"ulimits": {**rendered.ulimits, **added}})
    _check_engine(rendered, recipe_path)
    targets = _targets(rendered, nodes)
    secrets = secret_env_names(recipe) | set(moved)
    head = targets[0]
    run = RunInfo(
        run_id=run_id,
        recipe=recipe_path,
        name=rendered.display_name,
        engine=rendered.engine,
        runtime=rendered.runtime,
        image=rendered.docker_image if rendered.runtime != "native" else None,
        lair_version=__version__,
        port=rendered.port,
        health_path=rendered.health_path,
        ready_timeout_s=rendered.ready_timeout_s,
        master_addr=head.engine_addr,
        master_port=master_port,
        endpoint=f"http://{_reach(head, rendered.host)}:{rendered.port}/v1",
        served_model=rendered.served_model_name,
        gpus=rendered.gpus or "none",
        pull=pull,
        trusted=trusted,
        env={k: (REDACTED if k in secrets else v) for k, v in rendered.env.items()},
        secret_env=sorted(secrets),
        dropped=dropped,
        added=[f"--ulimit {k}={v} (the hosts cap {k}; podman's default is higher)" for k, v in added.items()],
    )
    ctx = _Ctx(rendered, run, python or (lambda _t: "python3"), workroot, caps, pull_timeout_s)
    ctx.peer_addr = targets[1].engine_addr if len(targets) > 1 else ""
    out = Plan(run=run, nodes=[_node(ctx, t, len(targets), find_script or default_find) for t in targets])
    secret_values = _secret_values(recipe, rendered, vals, secrets)
    _check_no_secret_in(out, secret_values)
    out.set_env(rendered.env, secret_values)
    return out


def describe_argv(argv: Sequence[str]) -> str:
    return shlex.join(argv)
