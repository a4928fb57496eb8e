"""Per-node resources of a recipe as schedulers count them (Slurm's --gres, Kubernetes' limits)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = ["gpus_per_node"]


def gpus_per_node(r: Recipe) -> int:
    """GPUs one node's process uses: ``gpus = "N"``, the devices of ``"device=0,1"``, and for
    ``"all"`` the rig's GPUs (``meta.hardware.gpu_count``, else the parallel sizes) per node."""
    g = (r.gpus or "").strip()
    if not g:
        return 0
    if g.isdigit():
        return int(g)
    if g.startswith("device="):
        return len([d for d in g.removeprefix("device=").strip("'\"").split(",") if d])
    total = (r.meta.hardware.gpu_count if r.meta.hardware else None) or r.world_size * r.data_parallel_size
    return max(1, math.ceil(total / r.required_nodes))
