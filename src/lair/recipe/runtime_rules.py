"""What a runtime can apply: the one rule ``lair check`` reports and ``lair plan`` refuses.

The native runtime starts the entrypoint as a plain process, so nothing that only a container
applies (a memory cap, shared memory, CPU quota, namespaces, mounts, devices, ulimits,
capabilities, privileged) can take effect there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lair.recipe.model import Recipe

__all__ = ["CONTAINER_ONLY", "NATIVE_REASON", "native_unsupported"]

CONTAINER_ONLY: tuple[tuple[str, str], ...] = (
    ("shm_size", "--shm-size"),
    ("memory_limit", "--memory"),
    ("cpus", "--cpus"),
    ("ipc", "--ipc"),
    ("pid", "--pid"),
    ("extra_mounts_manifest", "extra_mounts_manifest"),
    ("extra_mounts", "extra_mounts"),
    ("devices", "--device"),
    ("ulimits", "--ulimit"),
    ("cap_add", "--cap-add"),
    ("privileged", "--privileged"),
)
"""(recipe field, the container flag it becomes) for every container-only setting."""

NATIVE_REASON = "the native runtime has no container to apply it to"


def native_unsupported(recipe: Recipe) -> list[tuple[str, str]]:
    """(field, flag) of every container-only setting a native recipe sets; empty for containers."""
    if recipe.runtime != "native":
        return []
    return [(f, flag) for f, flag in CONTAINER_ONLY if getattr(recipe, f, None)]
