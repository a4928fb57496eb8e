"""The opt-in all-reduce probe (``lair doctor --allreduce``): torch.distributed on every node at once,
one rank per node, over the interface each node routes toward the head.

gloo on CPUs, NCCL when the node has GPUs. Rank 0 times ``iterations`` all-reduces of a float32
tensor of ``--allreduce-mib`` MiB after one warm-up and prints the mean; bus bandwidth is
nccl-tests' ``algbw x 2(n-1)/n``. The whole probe is bounded by ``--allreduce-timeout`` (each
node's process group is killed at the deadline) and rendezvous has the same timeout.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lair.launch.doctor.findings import AllReduce, Finding, NodeFacts

if TYPE_CHECKING:
    from lair.launch.doctor.request import DoctorRequest, Target

__all__ = ["ALLREDUCE_PORT", "ITERATIONS", "SCRIPT", "allreduce_findings"]

ALLREDUCE_PORT = 29517
ITERATIONS = 5
SCRIPT = r"""
import datetime, json, os, sys, time
import torch, torch.distributed as dist
rank, world, addr, port, mib, timeout = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]),
                                         int(sys.argv[5]), float(sys.argv[6]))
cuda = torch.cuda.is_available()
backend = "nccl" if cuda else "gloo"
dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=timeout))
x = torch.ones(mib * 2**20 // 4, dtype=torch.float32, device="cuda" if cuda else "cpu")
dist.all_reduce(x)
sync = torch.cuda.synchronize if cuda else (lambda: None)
sync(); dist.barrier()
t0 = time.perf_counter()
for _ in range(ITERATIONS):
    dist.all_reduce(x)
sync()
took = (time.perf_counter() - t0) / ITERATIONS
ok = bool(torch.all(x == float(world) ** (ITERATIONS + 1)))
dist.destroy_process_group()
if rank == 0:
    out = {"backend": backend, "seconds": took, "ok": ok, "bytes": x.numel() * 4}
    print("lair-allreduce " + json.dumps(out))
""".replace("ITERATIONS", str(ITERATIONS))


async def allreduce_findings(
    targets: Sequence[Target], facts: Sequence[NodeFacts], head: str | None, req: DoctorRequest
) -> tuple[list[Finding], AllReduce | None]:
    """Run the probe on every node; a failure is one finding with the first failing node's output."""
    from lair.runners import run_all, runner_for

    if len(targets) < 2 or not head:
        what = "the all-reduce probe needs two nodes or more"
        return [
            Finding(check="probe.allreduce", severity="info", what=what, fix="give --cluster or --nodes")
        ], None
    runners = [runner_for(t.node) for t in targets]
    ifaces = {n.rank: n.route.dev for n in facts if n.route and n.route.dev}

    async def one(i: int) -> str:
        argv = [req.allreduce_python, "-c", SCRIPT, str(i), str(len(targets)), head, str(ALLREDUCE_PORT)]
        argv += [str(req.allreduce_mib), str(req.allreduce_timeout_s)]
        dev = ifaces.get(targets[i].rank)
        env = {"GLOO_SOCKET_IFNAME": dev, "NCCL_SOCKET_IFNAME": dev} if dev else {}
        try:
            res = await runners[i].run(argv, env=env, check=True, timeout=req.allreduce_timeout_s)
        finally:
            await runners[i].close()
        return res.stdout

    outcomes = await run_all(runners, lambda r: one(runners.index(r)))
    failed = [o for o in outcomes if o.error is not None]
    if failed:
        what = f"all-reduce between the nodes failed on {failed[0].host}: {failed[0].error}"
        fix = (
            "check that the nodes reach each other on the route's interface (firewall, MTU) "
            "and that --allreduce-python has torch"
        )
        return [
            Finding(check="probe.allreduce", severity="error", node=failed[0].host, what=what, fix=fix)
        ], None
    result = _result(str(outcomes[0].value), len(targets))
    if result is None or not result.correct:
        what = "the all-reduce ran but " + ("gave a wrong sum" if result else "rank 0 printed no result")
        fix = "run it again with -v; a wrong sum is a broken transport (driver, NCCL version)"
        return [Finding(check="probe.allreduce", severity="error", what=what, fix=fix)], result
    return [], result


def _result(stdout: str, nodes: int) -> AllReduce | None:
    line = next((ln for ln in stdout.splitlines() if ln.startswith("lair-allreduce ")), None)
    if line is None:
        return None
    d = json.loads(line.split(" ", 1)[1])
    algbw = d["bytes"] / d["seconds"] / 1e9
    return AllReduce(
        backend=d["backend"],
        nodes=nodes,
        size_bytes=d["bytes"],
        iterations=ITERATIONS,
        seconds=d["seconds"],
        algbw_gbs=round(algbw, 3),
        busbw_gbs=round(algbw * 2 * (nodes - 1) / nodes, 3),
        correct=bool(d["ok"]),
    )
