"""What a launch returns (:class:`LaunchResult`), the callback that runs while it serves, and the
journal's node records of a plan: shared by the launcher (:mod:`lair.launch.run`) and its Slurm path
(:mod:`lair.launch.slurm`), which need them without importing each other."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lair.launch.journal import NodeRecord

if TYPE_CHECKING:
    from lair.inventory import Node
    from lair.plan import Plan

__all__ = ["LaunchResult", "OnReady", "node_records"]


@dataclass
class LaunchResult:
    run_id: str
    endpoint: str
    state: str
    ready_s: float | None = None
    started_at: float = 0.0
    api_key: str | None = field(default=None, repr=False)
    """the run's API key (engine env such as VLLM_API_KEY), for a benchmark of the running server"""
    secrets: list[str] = field(default_factory=list, repr=False)
    """every resolved secret value of the run, for redacting what is written about it"""


def node_records(plan: Plan, nodes: Sequence[Node]) -> list[NodeRecord]:
    return [
        NodeRecord(rank=n.rank, name=n.name, address=n.address, node=node.model_dump(), cluster=node.cluster)
        for n, node in zip(plan.nodes, nodes, strict=True)
    ]


OnReady = Callable[[LaunchResult], None]
"""Called with the result once the run is ready; the run serves while it runs, then stops."""
