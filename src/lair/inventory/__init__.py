"""The cluster inventory (named clusters of nodes, in the user's clusters file) and node leases.

from lair.inventory import load_inventory, acquire, release
nodes = acquire("homelab", 2, run_id="r-123")     # the first 2 free ranks, in rank order
nodes = acquire(None, run_id="r-124", hosts=["10.0.0.5", "n3"])   # --nodes
release("r-123")
"""

from __future__ import annotations

from lair.inventory.clusters import Cluster, Inventory, Node, SlurmSettings, adhoc_node, parse_inventory
from lair.inventory.leases import (
    ADHOC,
    Lease,
    RankStatus,
    acquire,
    acquire_nodes,
    leases,
    machine_key,
    reclaim,
    release,
    set_holder,
    status,
)
from lair.inventory.store import add_cluster, clusters_path, load_inventory, remove_cluster

__all__ = [
    "ADHOC",
    "Cluster",
    "Inventory",
    "Lease",
    "Node",
    "RankStatus",
    "SlurmSettings",
    "acquire",
    "acquire_nodes",
    "add_cluster",
    "adhoc_node",
    "clusters_path",
    "leases",
    "load_inventory",
    "machine_key",
    "parse_inventory",
    "reclaim",
    "release",
    "remove_cluster",
    "set_holder",
    "status",
]
