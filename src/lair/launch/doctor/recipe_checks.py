"""The recipe against the rig: placement, model shape, memory fit, shared memory, driver floor.

recipe.parallel  TP x PP x DP ranks over the nodes: whole ranks per node, GPUs enough on each
recipe.heads     attention heads (and KV heads) divisible by TP; PP no larger than the layers
recipe.fit       weights + KV per GPU against the GPUs the nodes have (lair fit's computation)
gpu.memory       GPU memory already taken by something else
recipe.shm       /dev/shm for the engine's processes (containers: --shm-size or --ipc host)
driver.floor     the node's NVIDIA driver against the image's CUDA floor (lair.fit.driver)
engine.python    an engine served by lair's own module under lair's Python (this machine) has the
                 modules of its extra (xllamacpp: ``lair[engines]``)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lair.launch.doctor.findings import Finding, NodeFacts

if TYPE_CHECKING:
    from lair.fit import ModelFacts
    from lair.recipe import Recipe

__all__ = ["RecipeRig", "driver_findings", "python_findings", "recipe_findings", "shape_findings"]

SHM_MIN = 1 * 2**30  # vLLM's multi-process message queues: Docker's 64 MiB default is not enough


@dataclass(frozen=True)
class RecipeRig:
    """What the recipe checks need: the recipe as it runs, its model facts (if any) and whether
    its processes get GPUs."""

    recipe: Recipe
    facts: ModelFacts | None
    wants_gpus: bool

    @property
    def world(self) -> int:
        r = self.recipe
        return r.tensor_parallel_size * r.pipeline_parallel_size * r.data_parallel_size


def _f(check: str, severity: str, node: str | None, what: str, fix: str) -> Finding:
    return Finding(check=check, severity=severity, node=node, what=what, fix=fix)


def shape_findings(rr: RecipeRig) -> list[Finding]:
    """What the recipe and its model facts alone decide (no node needed)."""
    r, out = rr.recipe, []
    tp, pp = r.tensor_parallel_size, r.pipeline_parallel_size
    if rr.world % r.required_nodes:
        what = (
            f"TP {tp} x PP {pp} x DP {r.data_parallel_size} = {rr.world} ranks do not split over "
            f"{r.required_nodes} nodes"
        )
        out.append(
            _f(
                "recipe.parallel",
                "error",
                None,
                what,
                f"make TP x PP x DP a multiple of required_nodes ({r.required_nodes})",
            )
        )
    m = rr.facts
    if m is None:
        return out
    if m.n_heads % tp:
        what = f"{m.n_heads} attention heads of {m.name} do not divide by tensor_parallel_size {tp}"
        fix = f"use a TP that divides {m.n_heads} ({_divisors(m.n_heads)})"
        out.append(_f("recipe.heads", "error", None, what, fix))
    if m.n_kv_heads and m.n_kv_heads % tp and tp % m.n_kv_heads:
        what = f"{m.n_kv_heads} KV heads neither divide by TP {tp} nor divide it (vLLM splits or copies them)"
        out.append(
            _f(
                "recipe.heads",
                "error",
                None,
                what,
                f"use a TP that divides {m.n_kv_heads} or is a multiple of it",
            )
        )
    if pp > m.n_layers:
        what = f"pipeline_parallel_size {pp} is more than the model's {m.n_layers} layers"
        out.append(_f("recipe.heads", "error", None, what, f"use PP <= {m.n_layers}"))
    return out


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, min(n, 64) + 1) if n % d == 0)


def recipe_findings(
    rr: RecipeRig, nodes: Sequence[NodeFacts], container: bool, *, seen_gpus_only: bool = False
) -> list[Finding]:
    """The recipe against each reachable node; ``seen_gpus_only``: a node where nvidia-smi shows
    no GPU at all is not counted short (launch's fast path: only what was seen)."""
    out: list[Finding] = []
    per_node = max(1, rr.world // max(1, rr.recipe.required_nodes))
    for n in (n for n in nodes if n.reachable):
        if n.gpus or not seen_gpus_only:
            out += _gpu_count(rr, n, per_node)
        out += _shm(rr, n, container) + _memory(rr, n)
    return out + _fit(rr, nodes, per_node)


def _gpu_count(rr: RecipeRig, n: NodeFacts, per_node: int) -> list[Finding]:
    if not rr.wants_gpus or len(n.gpus) >= per_node:
        return []
    seen = (
        f"{len(n.gpus)} GPUs"
        if n.gpus
        else "no GPU (nvidia-smi " + ("failed: " + n.nvidia_smi if n.nvidia_smi else "is not there") + ")"
    )
    what = f"the recipe puts {per_node} ranks (GPUs) on each node; this node has {seen}"
    fix = 'use more nodes (required_nodes) or a smaller TP x PP, or set gpus = "none" for a CPU engine'
    return [_f("recipe.parallel", "error", n.name, what, fix)]


def _shm(rr: RecipeRig, n: NodeFacts, container: bool) -> list[Finding]:
    r = rr.recipe
    if rr.world < 2 and r.required_nodes < 2:
        return []
    if container:
        if r.ipc == "host" or (r.shm_size and _bytes(str(r.shm_size)) >= SHM_MIN):
            return _shm_vs_memory(n, r)
        size = r.shm_size or "unset (Docker gives 64 MiB)"
        what = f"shm_size is {size}: TP/PP ranks pass tensors through /dev/shm"
        return [
            _f("recipe.shm", "warning", n.name, what, 'set shm_size = "2g" (or ipc = "host") in the recipe')
        ]
    if n.shm_bytes is not None and n.shm_bytes < SHM_MIN:
        what = f"/dev/shm is {n.shm_bytes / 2**20:.0f} MiB on the node"
        return [
            _f(
                "recipe.shm",
                "warning",
                n.name,
                what,
                "remount it larger: `mount -o remount,size=8G /dev/shm`",
            )
        ]
    return []


def _shm_vs_memory(n: NodeFacts, r: Recipe) -> list[Finding]:
    if not r.shm_size or not n.memory_bytes or _bytes(str(r.shm_size)) <= n.memory_bytes:
        return []
    what = f"shm_size {r.shm_size} is more than the node's {n.memory_bytes / 2**30:.1f} GiB of memory"
    return [_f("recipe.shm", "error", n.name, what, "lower shm_size")]


def _bytes(size: str) -> int:
    units = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    s = size.strip().lower().rstrip("ib") if size.strip().lower().endswith("ib") else size.strip().lower()
    num = s.rstrip("kmgtb")
    unit = s[len(num) :][:1]
    return int(float(num) * units.get(unit, 1)) if num else 0


def _memory(rr: RecipeRig, n: NodeFacts) -> list[Finding]:
    if not rr.wants_gpus:
        return []
    out = []
    for g in n.gpus:
        used = g.memory_total_mib - g.memory_free_mib
        if g.memory_total_mib and used > 0.1 * g.memory_total_mib:
            total = g.memory_total_mib / 1024
            what = f"GPU {g.index} ({g.name}) has {used / 1024:.1f} GiB of {total:.1f} GiB in use already"
            out.append(
                _f(
                    "gpu.memory",
                    "warning",
                    n.name,
                    what,
                    "stop what holds it (`nvidia-smi` lists the processes)",
                )
            )
    return out


def _fit(rr: RecipeRig, nodes: Sequence[NodeFacts], per_node: int) -> list[Finding]:
    from lair.errors import FitError
    from lair.fit import Hardware, find_device_by_smi_name, fit, layout_from_recipe
    from lair.fit.recipe_facts import with_fit_layout

    gpus = next((n.gpus for n in nodes if n.reachable and n.gpus), [])
    device = find_device_by_smi_name(gpus[0].name) if gpus else None
    if not rr.wants_gpus or rr.facts is None or device is None:
        return []
    layout = with_fit_layout(layout_from_recipe(rr.recipe), rr.recipe)
    hw = Hardware(device, gpus=layout.gpus, memory_bytes=gpus[0].memory_total_mib * 2**20)
    try:
        res = fit(rr.facts, hw, layout)
    except FitError:
        return []
    if res.verdict == "fits":
        return []
    sev = "warning" if res.verdict == "fits-with-offload" else "error"
    why = "; ".join(res.reasons) or "KV budget too small"
    what = f"{rr.facts.name} on {layout.gpus} x {device.name}: {res.verdict} ({why})"
    return [
        _f(
            "recipe.fit",
            sev,
            None,
            what,
            "see `lair fit RECIPE`: more GPUs, a smaller max_model_len or KV dtype",
        )
    ]


def driver_findings(recipe: Recipe, nodes: Sequence[NodeFacts]) -> list[Finding]:
    from lair.fit.driver import driver_floor, driver_meets

    floor = driver_floor(recipe)
    out = []
    for n in nodes:
        drivers = sorted({g.driver for g in n.gpus})
        if not drivers or floor.driver is None:
            continue
        low = [d for d in drivers if not driver_meets(d, floor.driver)]
        if low:
            what = f"NVIDIA driver {low[0]} is below the image's floor {floor.text}"
            compat = (
                f"; CUDA minor-version compatibility needs >= {floor.minor_compat_driver}"
                if floor.minor_compat_driver
                else ""
            )
            fix = f"install driver >= {floor.driver}, or use an image built for an older CUDA{compat}"
            out.append(_f("driver.floor", "error", n.name, what, fix))
    return out


def python_findings(recipe: Recipe, local_nodes: Sequence[str]) -> list[Finding]:
    """On each node that is this machine: the modules an engine served under lair's own Python
    imports (it is this interpreter there, so what it can import is what this process can)."""
    import importlib.util

    from lair.engines import get_engine

    spec = get_engine(recipe.engine)
    if not local_nodes or not spec.runs_on_lairs_python(recipe):
        return []
    missing = [m for m in spec.python_modules if importlib.util.find_spec(m) is None]
    if not missing:
        return []
    what = (
        f"engine {spec.name} runs {spec.server_module} under lair's Python ({sys.executable}), "
        f"which lacks {', '.join(repr(m) for m in missing)}"
    )
    fix = f"pip install 'lair[{spec.python_extra}]'"
    return [_f("engine.python", "error", n, what, fix) for n in local_nodes]
