"""What ``lair doctor`` is asked (:class:`DoctorRequest`) and each node it examines (:class:`Target`):
the models the checks (:mod:`.service`) and the all-reduce probe (:mod:`.allreduce`) share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lair.inventory import Node

__all__ = ["DoctorRequest", "Target"]


@dataclass
class DoctorRequest:
    """What ``lair doctor`` was asked: nodes (a cluster, hosts, or the recipe's), the recipe."""

    recipe: str | None = None
    cluster: str | None = None
    hosts: list[str] = field(default_factory=list)
    rig: str | None = None
    values: dict[str, str] = field(default_factory=dict)
    accept: bool | str = False
    allreduce: bool = False
    allreduce_python: str = "python3"
    allreduce_mib: int = 64
    allreduce_timeout_s: float = 120.0


@dataclass
class Target:
    """One node to examine, with what the run would need of it."""

    node: Node
    rank: int
    ports: list[int] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    wants_gpus: bool = False
    route_to: str | None = None
    """where its ranks' traffic goes: the head (the head itself: the next rank, as the plan detects)"""
