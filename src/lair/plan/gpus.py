"""GPU access: which GPUs a node's main process gets, and the flags that give them.

A selection is ``"all"``, a count (``"2"``: the first two), device ids (``"0,1"``, or Docker's
``"device=0,1"``) or ``"none"``. It comes from the node (the inventory's ``gpu_devices``), else the
recipe's ``gpus``, else the engine: GPU engines (:data:`GPU_ENGINES`) in a container get ``"all"``
by default, everything else none.

How a container gets them depends on the hosts' capability profile (``Capabilities.gpu_access``):

    gpus-flag   docker run --gpus all | --gpus 2 | --gpus '"device=0,1"'   (NVIDIA container toolkit)
    cdi         --device nvidia.com/gpu=all | --device nvidia.com/gpu=0 ...  (Container Device Interface)
    auto        gpus-flag for docker, cdi for podman (podman has no --gpus of its own)

A profile with ``gpus = false`` (no GPU container runtime) refuses any selection but none
(CapabilityError, see :mod:`lair.plan.capabilities`). A native process gets ``CUDA_VISIBLE_DEVICES``
for a count or ids (``"all"`` leaves the variable alone).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from lair.errors import ConfigError

if TYPE_CHECKING:
    from lair.recipe import Recipe
    from lair.rig import Capabilities

__all__ = ["GPU_ENGINES", "cuda_visible_devices", "default_gpus", "gpu_args", "parse_gpus"]

GPU_ENGINES = frozenset({"vllm", "sglang", "trtllm", "exllamav3", "tabbyapi"})
_IDS_RE = re.compile(r"^(?:device=)?(\d+(?:,\d+)*)$")


def parse_gpus(text: str) -> tuple[str, list[int]]:
    """``("all"|"none", [])``, ``("count", [n])`` or ``("ids", [i, ...])``; ConfigError if malformed."""
    t = text.strip().strip('"').lower()
    if t in ("all", "none"):
        return t, []
    if t.isdigit():
        return ("count", [int(t)]) if int(t) > 0 else ("none", [])
    m = _IDS_RE.match(t)
    if not m:
        raise ConfigError(
            f"gpus: not a GPU selection: {text!r}",
            hint='use "all", a count ("2"), device ids ("0,1" or "device=0,1") or "none"',
        )
    return "ids", [int(x) for x in m.group(1).split(",")]


def default_gpus(recipe: Recipe) -> str:
    """The recipe's selection, or the engine's default (``all`` for a GPU engine in a container)."""
    if recipe.gpus:
        return recipe.gpus
    return "all" if recipe.engine in GPU_ENGINES and recipe.runtime != "native" else "none"


def _mode(binary: str, caps: Capabilities) -> str:
    if caps.gpu_access != "auto":
        return caps.gpu_access
    return "cdi" if binary == "podman" else "gpus-flag"


def gpu_args(selection: str, binary: str, caps: Capabilities) -> list[str]:
    """The ``run`` flags that give a container ``selection`` on hosts described by ``caps``."""
    kind, nums = parse_gpus(selection)
    if kind == "none":
        return []
    if _mode(binary, caps) == "cdi":
        ids = [str(i) for i in (nums if kind == "ids" else range(nums[0]))] if kind != "all" else ["all"]
        return [a for i in ids for a in ("--device", f"nvidia.com/gpu={i}")]
    if kind == "all":
        return ["--gpus", "all"]
    if kind == "count":
        return ["--gpus", str(nums[0])]
    return ["--gpus", '"device=' + ",".join(str(i) for i in nums) + '"']  # quoted: docker reads CSV


def cuda_visible_devices(selection: str) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` for a native process given ``selection`` (None: leave it alone)."""
    kind, nums = parse_gpus(selection)
    if kind == "count":
        return ",".join(str(i) for i in range(nums[0]))
    if kind == "ids":
        return ",".join(str(i) for i in nums)
    return "" if kind == "none" and selection.strip().lower() == "none" else None
