"""``lair doctor``: probe every node at once, then draw findings from what came back.

:func:`doctor` is the command (every check, against a recipe when given); :func:`fast_findings` is
the subset ``lair launch`` runs on its planned nodes before it leases them (no clock, disk, fit or
probe; errors only).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lair.launch.doctor import checks as C
from lair.launch.doctor.findings import DoctorReport, Finding, NodeFacts
from lair.launch.doctor.needs import file_findings, hardware_findings, needed_files
from lair.launch.doctor.probe import ProbeSpec, probe_node
from lair.launch.doctor.recipe_checks import (
    RecipeRig,
    driver_findings,
    python_findings,
    recipe_findings,
    shape_findings,
)
from lair.launch.doctor.request import DoctorRequest, Target

if TYPE_CHECKING:
    from lair.fit import ModelFacts
    from lair.launch.resolve import Prepared
    from lair.recipe import Recipe

__all__ = ["DoctorRequest", "Target", "diagnose", "doctor", "fast_findings"]

ALL_CHECKS = (
    "reach.ssh", "clock.skew", "disk.free", "runtime.missing", "runtime.down", "gpu.runtime",
    "gpu.persistence", "net.route", "net.subnet", "net.mtu", "net.interface", "port.busy",
    "recipe.parallel", "recipe.heads", "recipe.fit", "gpu.memory", "recipe.shm", "driver.floor",
    "engine.python", "recipe.files", "recipe.hardware",
)  # fmt: skip
FAST_CHECKS = frozenset(
    {"reach.ssh", "runtime.missing", "runtime.down", "gpu.runtime", "net.route", "net.mtu",
     "net.interface", "port.busy", "recipe.parallel", "recipe.heads", "driver.floor", "engine.python"}
)  # fmt: skip


@dataclass
class Context:
    head: str | None
    runtimes: list[str]
    container: str | None = None
    rig: RecipeRig | None = None
    recipe_name: str | None = None
    disk_paths: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def doctor(req: DoctorRequest) -> tuple[DoctorReport, list[str]]:
    """Every check (the all-reduce probe when asked); returns the report and the secret values
    to keep out of anything written about it."""
    if req.recipe:
        prep = _prepare(req)
        targets, ctx = targets_of(prep, _rendered(prep, req))
    else:
        targets, ctx = _bare_targets(req)
    report = asyncio.run(diagnose(targets, ctx, frozenset(ALL_CHECKS), fast=False))
    if req.allreduce:
        from lair.launch.doctor.allreduce import allreduce_findings

        extra, result = asyncio.run(allreduce_findings(targets, report.nodes, ctx.head, req))
        report = _with(report, extra, ["probe.allreduce"])
        report.allreduce = result
    return redacted(report, ctx.secrets), ctx.secrets


def redacted(report: DoctorReport, secrets: Sequence[str]) -> DoctorReport:
    """The report with the run's secret values and credential-shaped text blanked (findings quote
    command lines of port holders, and engines print what they were given)."""
    from lair.launch.doctor.bundle import redact_text, redact_tree

    clean = DoctorReport.model_validate(redact_tree(report.model_dump(mode="json"), secrets))
    for n, raw in zip(clean.nodes, report.nodes, strict=True):
        n.raw = redact_text(raw.raw, secrets)
    return clean


def fast_findings(prep: Prepared) -> list[Finding]:
    """The launch's pre-lease subset on ``prep``'s planned nodes: errors only; a port held by an
    active lair run is left to the lease, which names that run."""
    targets, ctx = targets_of(prep, prep.recipe)
    report = asyncio.run(diagnose(targets, ctx, FAST_CHECKS, fast=True))
    return [f for f in report.findings if f.severity == "error" and not _lair_held(f)]


def _lair_held(f: Finding) -> bool:
    return f.check == "port.busy" and " - lair run " in f.what


def _with(report: DoctorReport, extra: list[Finding], ran: list[str]) -> DoctorReport:
    findings = report.findings + extra
    ok = not any(f.severity == "error" for f in findings)
    return report.model_copy(update={"findings": findings, "checks": report.checks + ran, "ok": ok})


# -- what to examine --------------------------------------------------------------------------------
def _prepare(req: DoctorRequest) -> Prepared:
    from lair.launch.resolve import Request, prepare

    r = Request(req.recipe or "", cluster=req.cluster, hosts=list(req.hosts), rig=req.rig, accept=req.accept)
    r.values = dict(req.values)
    return prepare(r, lease=False)


def _rendered(prep: Prepared, req: DoctorRequest) -> Recipe:
    from lair.launch.resolve import Request, rendered_recipe

    try:
        return rendered_recipe(prep, Request(req.recipe or "", rig=req.rig, values=dict(req.values)))
    except Exception:  # a value only the nodes know: the recipe's own fields still say enough
        return prep.recipe


def targets_of(prep: Prepared, recipe: Recipe) -> tuple[list[Target], Context]:
    plan = prep.plan
    targets = []
    for np, node in zip(plan.nodes, prep.nodes, strict=True):
        ports = sorted({p for s in np.steps if s.kind == "check" for p in (s.ports or [])})
        env = {**plan.run.env, **np.engine_env}
        sel = np.gpus or plan.run.gpus
        targets.append(Target(node, np.rank, ports, env, wants_gpus=sel not in (None, "", "none")))
    _routes(targets, plan.run.master_addr)
    container = recipe.runtime if recipe.runtime != "native" else None
    ctx = Context(
        head=plan.run.master_addr,
        runtimes=[container] if container else [],
        container=container,
        rig=RecipeRig(recipe, _facts(recipe, plan.run.recipe), any(t.wants_gpus for t in targets)),
        recipe_name=plan.run.recipe,
        disk_paths=_disk_paths(recipe),
        secrets=plan.secret_values(),
        files=needed_files(recipe),
    )
    return targets, ctx


def _routes(targets: list[Target], head: str | None) -> None:
    if len(targets) < 2 or not head:
        return
    for t in targets:
        t.route_to = head
    targets[0].route_to = targets[1].node.engine_address or targets[1].node.address


def _facts(recipe: Recipe, path: str) -> ModelFacts | None:
    from lair.fit.recipe_facts import local_facts, recipe_facts

    carried = recipe_facts(recipe)
    if carried is not None:
        return carried
    try:
        found = local_facts(recipe, Path(path).parent)
    except Exception:  # no readable model folder here: the shape checks need facts, not a model
        return None
    return found[0] if found else None


def _disk_paths(recipe: Recipe) -> list[str]:
    paths = [recipe.env.get("HF_HOME") or "~/.cache/huggingface"]
    model = str(recipe.model or "")
    if model.startswith("/") and "{" not in model:
        paths.append(model)
    paths += [m.host for m in recipe.extra_mounts if m.host.startswith("/") and "{" not in m.host]
    return list(dict.fromkeys(paths))


def _bare_targets(req: DoctorRequest) -> tuple[list[Target], Context]:
    from lair.errors import ConfigError
    from lair.inventory import adhoc_node, load_inventory

    inv = load_inventory()
    if req.hosts:
        nodes = [inv.find(h) or adhoc_node(h, i) for i, h in enumerate(req.hosts)]
    elif req.cluster:
        nodes = sorted(inv.get(req.cluster).nodes, key=lambda n: n.rank)
    else:
        raise ConfigError("nothing to examine", hint="give a recipe, --cluster NAME or --nodes HOST,HOST")
    targets = [Target(n, i, wants_gpus=True) for i, n in enumerate(nodes)]
    head = nodes[0].engine_address or nodes[0].address
    _routes(targets, head)
    ctx = Context(head=head if len(nodes) > 1 else None, runtimes=["docker", "podman"])
    ctx.disk_paths = ["~/.cache/huggingface", "/tmp"]
    return targets, ctx


# -- probing and findings -----------------------------------------------------------------------------
async def diagnose(
    targets: Sequence[Target], ctx: Context, checks: frozenset[str], *, fast: bool
) -> DoctorReport:
    from lair.runners import run_all, runner_for

    runners = [runner_for(t.node) for t in targets]
    by_runner = dict(zip(map(id, runners), targets, strict=True))

    async def one(runner: object) -> NodeFacts:
        t = by_runner[id(runner)]
        spec = ProbeSpec(
            head=t.route_to,
            disk_paths=[] if fast else ctx.disk_paths,
            runtimes=ctx.runtimes,
            ports=t.ports,
            gpus=t.wants_gpus or not fast,
            clock=not fast,
            files=[] if fast else ctx.files,
        )
        try:
            return await probe_node(runner, t.node.name, t.node.address, t.rank, spec)  # type: ignore[arg-type]
        finally:
            await runner.close()  # type: ignore[attr-defined]

    outcomes = await run_all(runners, one)
    facts = [o.value for o in outcomes if o.value is not None]
    findings = [f for f in _findings(facts, targets, ctx, fast) if f.check in checks]
    ran = [c for c in ALL_CHECKS if c in checks]
    return DoctorReport(
        ok=not any(f.severity == "error" for f in findings),
        recipe=ctx.recipe_name,
        head=ctx.head,
        checks=ran,
        nodes=facts,
        findings=findings,
    )


def _findings(
    facts: Sequence[NodeFacts], targets: Sequence[Target], ctx: Context, fast: bool = False
) -> list[Finding]:
    out: list[Finding] = []
    if ctx.rig is not None:
        out += shape_findings(ctx.rig)
    for n, t in zip(facts, targets, strict=True):
        out += C.reach_findings(n)
        if not n.reachable:
            continue
        out += C.clock_findings(n) + C.disk_findings(n)
        if ctx.container:
            out += C.runtime_findings(n, ctx.container)
        out += C.gpu_runtime_findings(n, ctx.container, t.wants_gpus and ctx.rig is not None)
        out += C.interface_findings(n, t.env) + C.port_findings(n, t.ports)
    if ctx.head:
        out += C.network_findings(facts, ctx.head)
    if ctx.rig is not None:
        out += recipe_findings(ctx.rig, facts, ctx.container is not None, seen_gpus_only=fast)
        if ctx.rig.wants_gpus:
            out += driver_findings(ctx.rig.recipe, facts)
        out += python_findings(ctx.rig.recipe, [t.node.name for t in targets if t.node.local])
        if not fast:
            out += file_findings(ctx.rig.recipe, facts) + hardware_findings(ctx.rig, facts)
    return out
