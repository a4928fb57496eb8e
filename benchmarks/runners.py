"""Runner and lease latencies: what every launch step pays before the engine does any work.

    sudo .venv/bin/python benchmarks/runners.py [--n 50]      # SSH rows need root (netns nodes)

Rows: a local command; an SSH connection (handshake + first command); a command on a reused SSH
connection (plain, with env ahead of stdin, with env through AcceptEnv); starting a detached
process; ``sleep 1`` on 4 nodes at once (fan-out); a lease acquire + release; 4 netns nodes up and
down. Prints a table (median, p90, max in ms) and writes ``benchmarks/out/runners.json``.

Most of an SSH command's cost is the node's login shell: sshd runs every command through the
user's shell, and bash reads ``~/.bashrc`` for SSH commands (a ``pyenv init`` there costs ~100 ms
per command). Keep node users' rc files light.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from lair.inventory import Cluster, Node, acquire, add_cluster, release
from lair.runners import LocalRunner, SshOptions, SshRunner, run_all
from lair.testing.nodes import NetnsNodes

OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "out"


async def timed(n: int, fn: Callable[[], Awaitable[object]]) -> list[float]:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - t) * 1000)
    return samples


async def ssh_rows(nodes: NetnsNodes, n: int, tmp: Path) -> dict[str, list[float]]:
    cluster = nodes.cluster("bench")
    node = cluster.nodes[0]

    async def connect_once() -> None:
        async with SshRunner(node) as r:
            await r.run("true")

    rows = {"ssh connect + first command": await timed(max(5, n // 5), connect_once)}
    file_env = SshRunner(node)
    accept_env = SshRunner(node, SshOptions(known_hosts="strict", known_hosts_file=node.ssh.known_hosts_file,
                                           env_via="accept-env"))  # fmt: skip
    env = {"LAIR_A": "1", "LAIR_B": "two"}
    rows["ssh command, reused connection"] = await timed(n, lambda: file_env.run("true"))
    rows["ssh command + env (stdin)"] = await timed(n, lambda: file_env.run("true", env=env))
    rows["ssh command + env (AcceptEnv)"] = await timed(n, lambda: accept_env.run("true", env=env))

    async def start_and_kill() -> None:
        h = await file_env.start(["sleep", "30"], log_path=str(tmp / "bench.log"))
        await file_env.kill(h.pid)

    rows["ssh start detached + kill"] = await timed(max(5, n // 5), start_and_kill)
    runners = [SshRunner(x) for x in cluster.nodes]
    await run_all(runners, lambda r: r.run("true"))
    rows[f"fan-out: sleep 1 on {len(runners)} nodes"] = await timed(
        3, lambda: run_all(runners, lambda r: r.run("sleep 1"))
    )
    for r in [file_env, accept_env, *runners]:
        await r.close()
    return rows


def lease_rows(n: int, tmp: Path) -> dict[str, list[float]]:
    os.environ["LAIR_HOME"] = str(tmp / "home")
    add_cluster(
        "bench", Cluster(nodes=[Node(name=f"b{i}", address=f"192.0.2.{i + 1}", rank=i) for i in range(8)])
    )
    samples = []
    for i in range(n):
        t = time.perf_counter()
        acquire("bench", 2, run_id=f"r{i}")
        release(f"r{i}")
        samples.append((time.perf_counter() - t) * 1000)
    return {"lease acquire(2) + release": samples}


def netns_rows(count: int) -> tuple[dict[str, list[float]], NetnsNodes]:
    t = time.perf_counter()
    nodes = NetnsNodes(count).up()
    return {f"{count} netns nodes up": [(time.perf_counter() - t) * 1000]}, nodes


def table(rows: dict[str, list[float]]) -> str:
    lines = [f"{'what':<36} {'n':>4} {'median ms':>10} {'p90 ms':>8} {'max ms':>8}", "-" * 70]
    for name, s in rows.items():
        p90 = sorted(s)[max(0, int(len(s) * 0.9) - 1)]
        lines.append(f"{name:<36} {len(s):>4} {statistics.median(s):>10.1f} {p90:>8.1f} {max(s):>8.1f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50, help="samples per row")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows = {"local command": asyncio.run(_local(args.n))}
        rows |= lease_rows(args.n, tmp)
        up, nodes = netns_rows(4)
        rows |= up
        try:
            rows |= asyncio.run(ssh_rows(nodes, args.n, tmp))
        finally:
            t = time.perf_counter()
            nodes.down()
            rows["4 netns nodes down"] = [(time.perf_counter() - t) * 1000]
    print(table(rows))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "runners.json").write_text(json.dumps(rows, indent=1))
    return 0


async def _local(n: int) -> list[float]:
    r = LocalRunner()
    return await timed(n, lambda: r.run("true"))


if __name__ == "__main__":
    raise SystemExit(main())
