"""Many real ``lair`` processes race for the ranks of one 3-node cluster: no rank is ever held by two
runs at once. Every grant is recorded with monotonic timestamps (CLOCK_MONOTONIC is system-wide) and
checked against every other grant of the same rank."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from lair.inventory import Cluster, Node, add_cluster, status

pytestmark = pytest.mark.integration

WORKERS = 24
WORKER = r"""
import json, random, sys, time
from lair.errors import AllocationError
from lair.inventory import acquire, release, status

idx, attempts, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(idx)
print("ready", flush=True)
sys.stdin.readline()  # start barrier: the parent says go once every worker is ready
for k in range(attempts):
    run_id = f"w{idx}-{k}"
    want = rng.choice([1, 2]) if mode == "churn" else 1
    try:
        nodes = acquire("race", want, run_id=run_id)
    except AllocationError:
        print(json.dumps({"run": run_id, "denied": True}), flush=True)
        continue
    granted = time.monotonic_ns()
    # while held: the lease file must name this run for exactly these ranks
    mine = sorted(s.node.rank for s in status("race") if s.lease and s.lease.run_id == run_id)
    released = time.monotonic_ns()
    if mode == "churn":
        release(run_id)
    event = {"run": run_id, "ranks": sorted(n.rank for n in nodes), "mine": mine}
    print(json.dumps(event | {"granted": granted, "released": released}), flush=True)
if mode in ("hold", "wait"):  # keep holding until the parent has every event (or kills us)
    sys.stdin.readline()
"""


@pytest.fixture
def race_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("LAIR_HOME", str(tmp_path))
    add_cluster(
        "race", Cluster(nodes=[Node(name=f"r{i}", address=f"192.0.2.{i + 1}", rank=i) for i in range(3)])
    )
    return {**os.environ, "LAIR_HOME": str(tmp_path)}


def race(env: dict[str, str], attempts: int, mode: str) -> list[dict[str, Any]]:
    """Start every worker, wait until all are ready, release them at once, collect their events."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(i), str(attempts), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(WORKERS)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    events = []
    if mode == "hold":  # every worker reports while all winners still hold: a lease is only
        for p in procs:  # reclaimable once its holder is dead, which is not a double grant
            assert p.stdout is not None
            events.append(json.loads(p.stdout.readline()))
    for p in procs:
        out, err = p.communicate(input="done\n" if mode == "hold" else None, timeout=180)
        assert p.returncode == 0, err
        events += [json.loads(line) for line in out.splitlines()]
    return events


def test_one_shot_race_grants_each_rank_once(race_cluster: dict[str, str]) -> None:
    events = race(race_cluster, attempts=1, mode="hold")
    grants = [e for e in events if not e.get("denied")]
    assert len(events) == WORKERS
    assert sorted(r for g in grants for r in g["ranks"]) == [0, 1, 2]  # 3 winners, distinct ranks
    assert all(g["mine"] == g["ranks"] for g in grants)
    assert len(events) - len(grants) == WORKERS - 3
    # the winners have exited: their leases are reclaimed by the next look
    from lair.inventory import reclaim

    assert sorted(lease.run_id for lease in reclaim()) == sorted(g["run"] for g in grants)


def test_churning_launches_never_share_a_rank(race_cluster: dict[str, str]) -> None:
    events = race(race_cluster, attempts=8, mode="churn")
    grants = [e for e in events if not e.get("denied")]
    assert len(events) == WORKERS * 8 and len(grants) >= 10
    assert all(g["mine"] == g["ranks"] for g in grants)
    by_rank: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for g in grants:
        for r in g["ranks"]:
            by_rank[r].append((g["granted"], g["released"], g["run"]))
    for rank, spans in by_rank.items():
        spans.sort()
        for (_, end, run), (start, _, nxt) in itertools.pairwise(spans):
            assert end < start, f"rank {rank} held by {run} and {nxt} at once"
    assert all(s.lease is None for s in status("race"))  # every run released what it took


def test_lease_of_a_killed_launcher_is_reclaimed_by_lair_nodes(race_cluster: dict[str, str]) -> None:
    def lair_nodes() -> dict[str, Any]:
        argv = [sys.executable, "-m", "lair", "nodes", "--cluster", "race", "--json"]
        done = subprocess.run(argv, env=race_cluster, capture_output=True, text=True, check=True)
        data: dict[str, Any] = json.loads(done.stdout)
        return data

    argv = [sys.executable, "-c", WORKER, "0", "1", "wait"]
    with subprocess.Popen(
        argv, env=race_cluster, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        assert holder.stdout.readline() == "ready\n"
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert json.loads(holder.stdout.readline())["ranks"] == [0]
        before = lair_nodes()
        assert before["clusters"]["race"][0]["lease"]["run_id"] == "w0-0" and before["reclaimed"] == []
        holder.kill()  # SIGKILL: no chance to release
        holder.wait()
    after = lair_nodes()
    assert after["reclaimed"] == ["w0-0"] and after["clusters"]["race"][0]["state"] == "free"
