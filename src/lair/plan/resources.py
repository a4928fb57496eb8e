"""Per-node resources of a recipe as schedulers count them (Slurm's --gres, Kubernetes' limits)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = ["gpus_per_node"]


def gpus_per_node(r: Recipe) -> int:
    """GPUs one node's process uses (:mod:`lair.plan.gpus` selections): a count, the ids given, none,
    and for ``"all"`` the rig's GPUs (``meta.hardware.gpu_count``, else the parallel sizes) per node."""
    from lair.plan.gpus import default_gpus, parse_gpus

    kind, values = parse_gpus(default_gpus(r))
    if kind == "none":
        return 0
    if kind == "count":
        return values[0]
    if kind == "ids":
        return len(values)
    total = (r.meta.hardware.gpu_count if r.meta.hardware else None) or r.world_size * r.data_parallel_size
    return max(1, math.ceil(total / r.required_nodes))
