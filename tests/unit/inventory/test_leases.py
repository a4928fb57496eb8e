"""Leases in one process: first free ranks, explicit hosts, all-or-nothing, release, reclaim."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lair.errors import AllocationError
from lair.inventory import (
    ADHOC,
    Cluster,
    Node,
    acquire,
    acquire_nodes,
    add_cluster,
    leases,
    machine_key,
    reclaim,
    release,
    set_holder,
    status,
)


@pytest.fixture
def trio(home: Path) -> Path:
    nodes = [Node(name=f"n{i}", address=f"10.0.0.{i + 2}", rank=i) for i in (2, 0, 1)]
    add_cluster("trio", Cluster(nodes=nodes))
    return home


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(proc.stdout)


def test_first_free_ranks_in_rank_order(trio: Path) -> None:
    assert [n.name for n in acquire("trio", 2, run_id="r1")] == ["n0", "n1"]
    assert [n.name for n in acquire("trio", 1, run_id="r2")] == ["n2"]
    with pytest.raises(AllocationError, match=r"0 free of 3 nodes, 1 needed \(held by runs: r1, r2\)"):
        acquire("trio", 1, run_id="r3")
    assert [lease.node for lease in release("r1")] == ["n0", "n1"]
    assert [n.name for n in acquire("trio", 1, run_id="r3")] == ["n0"]


def test_lease_records_holder(trio: Path) -> None:
    acquire("trio", 1, run_id="r1")
    held = {s.node.name: s.lease for s in status("trio")}
    lease = held["n0"]
    assert lease is not None and held["n1"] is None
    assert (lease.run_id, lease.pid, lease.key) == ("r1", os.getpid(), "10.0.0.2")
    assert (lease.cluster, lease.rank) == ("trio", 0)
    assert lease.holder_alive() is True and lease.started_at.endswith("+00:00")
    data = json.loads((trio / "state" / "leases" / "machines.json").read_text())
    assert data["leases"]["10.0.0.2"]["run_id"] == "r1"


def test_explicit_hosts_all_or_nothing(trio: Path) -> None:
    acquire("trio", 1, run_id="r1")  # n0
    with pytest.raises(AllocationError, match=r"n0 \(held by run r1\)"):
        acquire(None, run_id="r2", hosts=["n1", "10.0.0.2"])
    assert [s.lease is None for s in status("trio")] == [False, True, True]  # n1 not taken either
    got = acquire(None, run_id="r2", hosts=["10.0.0.4", "n1"])
    assert [(n.name, n.cluster) for n in got] == [("n2", "trio"), ("n1", "trio")]


def test_adhoc_hosts_get_their_own_leases(trio: Path) -> None:
    got = acquire(None, run_id="r1", hosts=["192.0.2.7", "admin@192.0.2.8"])
    assert [(n.address, n.user, n.port, n.cluster) for n in got] == [
        ("192.0.2.7", "root", 22, ""),
        ("192.0.2.8", "admin", 22, ""),
    ]
    assert sorted(leases(ADHOC)) == ["192.0.2.7", "192.0.2.8"]
    with pytest.raises(AllocationError):
        acquire(None, run_id="r2", hosts=["192.0.2.8"])
    with pytest.raises(AllocationError, match="given twice"):
        acquire(None, run_id="r3", hosts=["n1", "10.0.0.3"])


def test_dead_holders_are_reclaimed(trio: Path) -> None:
    acquire("trio", 2, run_id="dead", pid=dead_pid())
    assert [s.lease.run_id if s.lease else None for s in status("trio")] == ["dead", "dead", None]
    assert [n.name for n in acquire("trio", 3, run_id="next")] == ["n0", "n1", "n2"]  # reclaimed first
    release("next")
    acquire("trio", 1, run_id="alive")
    acquire("trio", 1, run_id="dead2", pid=dead_pid())
    assert [lease.run_id for lease in reclaim()] == ["dead2"]
    assert [s.lease.run_id if s.lease else None for s in status("trio")] == ["alive", None, None]


def test_reused_pid_is_not_the_holder(trio: Path) -> None:
    acquire("trio", 1, run_id="r1")
    path = trio / "state" / "leases" / "machines.json"
    data = json.loads(path.read_text())
    data["leases"]["10.0.0.2"]["pid_start"] -= 1  # same pid, different start time: a recycled pid
    path.write_text(json.dumps(data))
    assert [lease.run_id for lease in reclaim()] == ["r1"]


def test_detached_leases_survive_reclaim(trio: Path) -> None:
    acquire("trio", 1, run_id="det", pid=dead_pid())
    assert set_holder("det", None) == 1
    assert reclaim() == []
    lease = status("trio")[0].lease
    assert lease is not None and lease.pid is None and lease.holder_alive() is None
    release("det")
    assert status("trio")[0].lease is None


def test_other_control_hosts_are_never_reclaimed(trio: Path) -> None:
    acquire("trio", 1, run_id="far", pid=dead_pid())
    path = trio / "state" / "leases" / "machines.json"
    data = json.loads(path.read_text())
    data["leases"]["10.0.0.2"]["hostname"] = "another-control-host"
    path.write_text(json.dumps(data))
    assert reclaim() == []


def test_nothing_to_allocate_is_an_error(trio: Path) -> None:
    with pytest.raises(AllocationError):
        acquire("trio", None, run_id="r")


def test_one_machine_in_two_clusters_and_nodes_is_leased_once(trio: Path) -> None:
    """The same machine as rank 0 of "trio", rank 1 of "other" (written differently) and a --nodes
    host: whoever takes it first holds it for all three."""
    other = [Node(name="o0", address="10.0.0.9", rank=0), Node(name="o1", address="::ffff:10.0.0.2", rank=1)]
    add_cluster("other", Cluster(nodes=other))
    assert machine_key(other[1]) == machine_key(Node(name="x", address="10.0.0.2", rank=0)) == "10.0.0.2"
    acquire("trio", 1, run_id="a")  # n0 = 10.0.0.2
    assert [n.name for n in acquire("other", 1, run_id="b")] == ["o0"]
    with pytest.raises(AllocationError, match=r"0 free of 2 nodes, 2 needed \(held by runs: a, b\)"):
        acquire("other", 2, run_id="c")
    with pytest.raises(AllocationError, match=r"n0 \(held by run a\)"):
        acquire(None, run_id="d", hosts=["10.0.0.2"])
    assert list(leases()) == ["10.0.0.2", "10.0.0.9"]
    assert [s.lease.run_id if s.lease else None for s in status("other")] == ["b", "a"]


def test_loopback_names_are_one_machine(trio: Path) -> None:
    local = Node(name="local", address="127.0.0.1", rank=0, local=True)
    acquire_nodes([local], run_id="l1")
    for host in ("localhost", "127.0.0.1", "127.0.1.1"):
        with pytest.raises(AllocationError, match="held by run l1"):
            acquire(None, run_id="l2", hosts=[host])
    assert list(leases(ADHOC)) == ["localhost"]
