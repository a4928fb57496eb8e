"""What a recipe needs of a node, against what the node has: the files it names, its hardware.

recipe.files     each path the run needs on the node (a mount's source, the per-file mount
                 manifest, a native entrypoint's program) exists there; one a ``before_serve`` hook
                 makes is a warning naming that hook (and the outside repository it fetches, if any)
recipe.hardware  the GPUs (total count, memory per GPU: the recipe's ``meta.hardware``, else the
                 weights per GPU lair fit computes), host memory (``meta.hardware.host_ram_gb`` or
                 ``meta.requirements.ram_gb``), disk (``disk_gb``, against the most free space of
                 the paths the doctor reads) and a container's ``cpus`` (against the node's CPUs)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lair.launch.doctor.findings import Finding, NodeFacts

if TYPE_CHECKING:
    from lair.launch.doctor.recipe_checks import RecipeRig
    from lair.recipe import Recipe

__all__ = ["file_findings", "hardware_findings", "needed_files"]

GIB = 2**30
_URL = re.compile(r"(?:https?|git|ssh)://[^\s'\"]+|git@[^\s'\"]+")


def _fixed(path: str) -> bool:
    return path.startswith("/") and "{" not in path and "$" not in path


def needed_files(recipe: Recipe) -> list[str]:
    """The absolute paths a run of ``recipe`` needs on each node before it starts."""
    paths = [m.host for m in recipe.extra_mounts]
    if recipe.extra_mounts_manifest:
        paths.append(str(recipe.extra_mounts_manifest))
    if recipe.runtime == "native" and recipe.entrypoint:
        paths.append(recipe.entrypoint[0])
    return list(dict.fromkeys(p for p in paths if _fixed(p)))


_MAKES = re.compile(r"\b(mkdir|git clone|mv|cp|touch|ln|wget|curl|rsync|tar|unzip)\b|>")


def _parents(path: str) -> list[str]:
    """``path`` and the folders above it, deepest first, down to two levels (``/home/me``)."""
    parts = path.rstrip("/").split("/")
    return ["/".join(parts[:i]) for i in range(len(parts), 2, -1)]


def _maker(recipe: Recipe, path: str) -> tuple[str, bool] | None:
    """The ``before_serve`` hook that names ``path`` or a folder above it, and whether a command of
    a hook that names it makes files (mkdir, git clone, cp, > ... in the same step)."""
    hooks = [h.run for h in recipe.before_serve if h.run]
    named = [(p, t) for p in _parents(path) for t in hooks if _names(t, p)]
    if not named:
        return None
    for p, text in named:
        if any(_names(part, p) and _MAKES.search(part) for part in re.split(r"\n|;|&&|\|\|", text)):
            return text, True
    return named[0][1], False


def _names(text: str, path: str) -> bool:
    """Whether ``text`` names ``path`` itself (not only a path beside it or under it)."""
    return re.search(re.escape(path) + r"(?![\w./-])", text) is not None


def file_findings(recipe: Recipe, nodes: Sequence[NodeFacts]) -> list[Finding]:
    out = []
    for n in (n for n in nodes if n.reachable):
        for path, there in n.files.items():
            if not there:
                out.append(_missing(recipe, n.name, path))
    return out


def _missing(recipe: Recipe, node: str, path: str) -> Finding:
    found = _maker(recipe, path)
    if found is None:
        what = f"{path} does not exist on the node (the recipe needs it before the engine starts)"
        return Finding(check="recipe.files", severity="error", node=node, what=what, fix=f"create {path}")
    hook, makes = found
    urls = list(dict.fromkeys(_URL.findall(hook)))
    src = f", fetching {', '.join(urls)}" if urls and makes else ""
    how = f"a before_serve hook makes it{src}" if makes else "a before_serve hook names it"
    what = f"{path} does not exist on the node yet ({how})"
    fix = (
        "check that the hook can run there (network, credentials, the repository's pinned commit)"
        if makes
        else f"make sure the hook creates {path}, or create it before the launch"
    )
    return Finding(check="recipe.files", severity="warning", node=node, what=what, fix=fix)


def hardware_findings(rr: RecipeRig, nodes: Sequence[NodeFacts]) -> list[Finding]:
    """The recipe's hardware needs against the reachable nodes."""
    up = [n for n in nodes if n.reachable]
    if not up:
        return []
    out = _gpu_total(rr, up) + _gpu_memory(rr, up)
    for n in up:
        out += _ram(rr.recipe, n) + _disk(rr.recipe, n) + _cpus(rr.recipe, n)
    return out


def _cpus(recipe: Recipe, n: NodeFacts) -> list[Finding]:
    if recipe.runtime == "native" or not recipe.cpus or not n.cpus or recipe.cpus <= n.cpus:
        return []
    what = f"cpus = {recipe.cpus:g} is more than the node's {n.cpus} CPUs (the container engine refuses it)"
    return [_f("error", n.name, what, f"a node with {recipe.cpus:g} CPUs or more, or a lower cpus")]


def _f(severity: str, node: str | None, what: str, fix: str) -> Finding:
    return Finding(check="recipe.hardware", severity=severity, node=node, what=what, fix=fix)


def _gpu_total(rr: RecipeRig, nodes: Sequence[NodeFacts]) -> list[Finding]:
    hw = rr.recipe.meta.hardware
    want = hw.gpu_count if hw and hw.gpu_count else 0
    have = sum(len(n.gpus) for n in nodes)
    if not rr.wants_gpus or have >= want:
        return []
    model = f" {hw.gpu_model}" if hw and hw.gpu_model else ""
    what = f"the recipe's hardware is {want}x{model} GPUs; the nodes have {have} in all"
    return [_f("error", None, what, "run it on nodes with those GPUs (meta.hardware)")]


def _per_gpu_need(rr: RecipeRig) -> tuple[float, str] | None:
    """Bytes each GPU must hold, and where that number comes from."""
    hw = rr.recipe.meta.hardware
    if hw and hw.vram_gb:  # a card's "96 GB" is decimal at least (nvidia-smi: 97,887 MiB)
        return hw.vram_gb * 1e9, f"meta.hardware.vram_gb = {hw.vram_gb:g}"
    if rr.facts is None:
        return None
    from lair.fit import layout_from_recipe
    from lair.fit.recipe_facts import with_fit_layout

    layout = with_fit_layout(layout_from_recipe(rr.recipe), rr.recipe)
    shards = max(1, layout.tp * layout.pp)
    return rr.facts.weight_bytes / shards, f"lair fit: {rr.facts.name}'s weights over TP x PP = {shards}"


def _gpu_memory(rr: RecipeRig, nodes: Sequence[NodeFacts]) -> list[Finding]:
    need = _per_gpu_need(rr) if rr.wants_gpus else None
    if need is None:
        return []
    size, why = need
    out = []
    for n in nodes:
        have = max((g.memory_total_mib * 2**20 for g in n.gpus), default=0)
        if have < size:
            seen = f"{have / GIB:.1f} GiB per GPU" if n.gpus else "no GPU"
            what = f"each GPU must hold {size / GIB:.1f} GiB ({why}); this node has {seen}"
            out.append(_f("error", n.name, what, "GPUs with more memory, or more of them (a larger TP)"))
    return out


def _ram(recipe: Recipe, n: NodeFacts) -> list[Finding]:
    hw, rq = recipe.meta.hardware, recipe.meta.requirements
    stated = (hw.host_ram_gb if hw else None) or (rq.ram_gb if rq else None)
    if not n.memory_bytes or not stated or stated * 1e9 <= n.memory_bytes:
        return []
    what = f"the recipe needs {stated:g} GB of host memory; this node has {n.memory_bytes / 1e9:.1f} GB"
    return [_f("error", n.name, what, "a node with more memory (meta.hardware.host_ram_gb)")]


def _disk(recipe: Recipe, n: NodeFacts) -> list[Finding]:
    hw, rq = recipe.meta.hardware, recipe.meta.requirements
    stated = (hw.disk_gb if hw else None) or (rq.disk_gb if rq else None)
    free = max((d.free_bytes for d in n.disks), default=None)
    if free is None or not stated or stated * 1e9 <= free:
        return []
    what = f"the recipe needs {stated:g} GB of disk; the most free on this node is {free / 1e9:.1f} GB"
    return [_f("error", n.name, what, "free space where the model goes, or another disk")]
