"""``lair plan --target kubernetes``: the recipe's plan on pods instead of nodes, as manifests.

The plan is built as for any launch (recipe, rig placeholders, trust) but on the pods'
DNS names (:func:`lair.plan.manifests.pod_addresses`); nothing is leased and no node is touched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lair.inventory import Node
    from lair.launch.resolve import Prepared, Request
    from lair.plan.manifests import KubeOptions, Manifests
    from lair.recipe import Recipe

__all__ = ["kubernetes_manifests"]


def _pods(opts: KubeOptions) -> Callable[[Recipe, str], list[Node]]:
    from lair.inventory import Node
    from lair.plan.manifests import pod_addresses

    def place(recipe: Recipe, _run_id: str) -> list[Node]:
        addrs = pod_addresses(opts.name, recipe.required_nodes, opts.workload)
        return [
            Node(name=a.split(".", 1)[0], address=a, rank=i, interface=opts.interface)
            for i, a in enumerate(addrs)
        ]

    return place


def kubernetes_manifests(req: Request, opts: KubeOptions) -> tuple[Prepared, Manifests]:
    """The manifests of ``req``'s recipe; ``opts.name`` empty: the recipe's slug (or folder name)."""
    import dataclasses

    from lair.launch.resolve import load_source, prepare, rendered_recipe
    from lair.plan.manifests import kube_name, render_manifests
    from lair.recipe import load_recipe

    if not opts.name:
        path = load_source(req.recipe)[0]
        recipe = load_recipe(path)
        opts = dataclasses.replace(opts, name=kube_name(recipe.meta.slug or path.parent.name or path.stem))
    req = dataclasses.replace(req, place=_pods(opts), run_id=req.run_id or opts.name)
    prep = prepare(req, lease=False)
    return prep, render_manifests(prep.plan, rendered_recipe(prep, req), opts)
