"""Two app hosts behind nginx against one, with wrk over https, on this machine.

The deployment of ``tests/integration/registry/test_two_hosts.py``: network-namespace hosts on a
private bridge, each running ``lair serve --workers 1`` over one PostgreSQL and one S3 store (moto's
server) on the bridge, behind ``deploy/nginx/lair-registry.conf`` (one nginx worker, TLS with a
self-signed certificate). wrk asks for one recipe's JSON (``/api/v1/recipes/tiny-cpu.json``) and,
separately, its page, through nginx; the one-host run has only the first host in the upstream.
Runs alternate one host / two hosts, ``--runs`` times; the median of each is reported.

All of it shares this machine's cores: nginx, wrk, PostgreSQL and both app processes. The ratio says
how much of the app's share of the machine a second process wins here, not what a second machine
gives (see docs/deploy.md, "Scaling to N hosts").

``--host-cores C`` gives each app host a CPU quota of C cores (a cgroup of the ``cpu`` controller,
v1 or v2, holding all of the host's processes), as a machine of its own would have: a second host then
brings cores of its own, and nginx, wrk and PostgreSQL keep the rest. Without it the hosts take what
the machine has. ``--pin`` puts the shared parts (nginx, wrk, PostgreSQL, the object store: this
process and its children) on CPU 0 and the app hosts on the other CPUs, so that no host shares a core
with them either, as on separate machines (with ``--host-cores``, whose quotas then split those CPUs).
``--slugs N`` seeds N recipes (the load benchmark's catalogue) and reads the JSON and the page of one of
them at random on each request, as a live site is read, instead of one recipe's over and over (where
the requests in flight together share one database read, which favours the one host).

Usage: ``python benchmarks/two_hosts.py [--runs 3] [--seconds 8] [--connections 32] [--host-cores 0.5]
[--pin] [--slugs 2000]``
(root: netns, cgroups). Prints a table and writes ``two_hosts[_{capped,pinned}_C][_spread].{md,json}``
under benchmarks/results/, one file per set-up.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from lair.registry.serve import prepare
from lair.testing.deploy import nginx_binary, nginx_conf
from lair.testing.nodes import NetnsNodes, TestNode
from lair.testing.postgres import pg_server
from lair.testing.registry import free_port, wait_http
from lair.testing.s3 import s3_server
from registry_load import run_wrk, seed  # the load benchmark's wrk runner and catalogue, beside this file

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
PORT = 8780
PATHS = {"recipe JSON": "/api/v1/recipes/tiny-cpu.json", "recipe page": "/recipes/tiny-cpu"}
COLD = "search, a new query each request"
"""The app-bound case: every request a search URL no host has answered before (no cache can hold it),
so each one is the app's own work (the query, its hits' JSON), against the proxy's and wrk's small
share: what a second host's cores add when the app is the limit."""
WORDS = ("", "llama", "qwen", "tiny", "vllm", "cpu")


def cold_paths(run: int, runs: int) -> list[str]:
    """Run ``run``'s share of a pool of distinct searches: no two runs (nor warm-ups) share a URL."""
    pool = [
        f"/api/v1/recipes?min_context={c}&limit={limit}&sort={sort}" + (f"&q={w}" if w else "")
        for c in range(1, 8193)
        for limit in (5, 10, 20)
        for sort in ("votes", "updated")
        for w in WORDS
    ]
    size = len(pool) // runs
    return pool[run * size : (run + 1) * size]


def wrk_paths(
    base: str, paths: list[str], seconds: int, connections: int, tmp: Path, order: str = "turn"
) -> dict[str, float]:
    """The load benchmark's wrk over ``paths``, in this file's row keys: in turn (each thread from its
    own half: every request a new URL), or one at ``random`` for each request."""
    r = run_wrk(base, paths, seconds, connections, 2, tmp, order=order)
    if order == "turn":
        assert r["requests"] < len(paths) // 2, "the run repeated URLs: give it a larger pool"
    return {"rps": r["req_s"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "errors": float(r["errors"])}


def _units(value: str, unit: str) -> float:
    scale = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "": 1.0, "k": 1e3, "M": 1e6}
    return float(value) * scale[unit]


def wrk(url: str, seconds: int, connections: int) -> dict[str, float]:
    """One wrk run: requests a second, median and p99 latency (ms), non-2xx answers and errors."""
    argv = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", url]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=seconds + 60).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])  # type: ignore[index]
    lat = {p: _units(v, u) for p, v, u in re.findall(r"\s(50|99)%\s+([\d.]+)(us|ms|s)", out)}
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "rps": rps, "p50_ms": lat["50"], "p99_ms": lat["99"],
        "non_2xx": float(bad[1]) if bad else 0.0,
        "socket_errors": float(sum(int(g) for g in errors.groups())) if errors else 0.0,
    }  # fmt: skip


def cpu_seconds(groups: list[int]) -> float:
    """User + system CPU seconds of every live process in these process groups (/proc)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in groups:  # field 5 of stat: the process group
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def spread_paths(path: str, slugs: int) -> list[str]:
    """``path`` (one recipe's JSON or page) for each of the ``slugs`` seeded recipes."""
    return [path.replace("tiny-cpu", f"bench-{i}") for i in range(slugs)]


def _run(
    url: str,
    args: argparse.Namespace,
    apps: list[int],
    nginx: int,
    cold: tuple[list[str], Path] | None = None,
    spread: tuple[list[str], Path] | None = None,
) -> dict[str, float]:
    before = cpu_seconds(apps), cpu_seconds([nginx])
    if spread is not None:
        row = wrk_paths(url, spread[0], args.seconds, args.connections, spread[1], "random")
    elif cold is None:
        row = wrk(url, args.seconds, args.connections)
    else:
        row = wrk_paths(url, cold[0], args.seconds, args.connections, cold[1])
    row["app_cores"] = (cpu_seconds(apps) - before[0]) / args.seconds
    row["nginx_cores"] = (cpu_seconds([nginx]) - before[1]) / args.seconds
    return row


def cpu_group(name: str, cores: float) -> Path:
    """A cgroup whose processes together get at most ``cores`` CPUs (created, or reset, here)."""
    period = 100_000
    root = Path("/sys/fs/cgroup")
    control = root / "cgroup.subtree_control"
    if control.exists() and "cpu" in control.read_text().split():
        group = root / name  # cgroup v2
        group.mkdir(exist_ok=True)
        (group / "cpu.max").write_text(f"{int(cores * period)} {period}")
        return group
    group = root / "cpu" / name  # cgroup v1's cpu controller
    group.mkdir(exist_ok=True)
    (group / "cpu.cfs_period_us").write_text(str(period))
    (group / "cpu.cfs_quota_us").write_text(str(int(cores * period)))
    return group


def app_cpus() -> set[int]:
    """The CPUs of the app hosts under ``--pin``: all but CPU 0, which the shared parts keep."""
    return set(range(1, os.cpu_count() or 2))


def _serve(
    node: TestNode, db: str, env: dict[str, str], log: Path, group: Path | None = None, pin: bool = False
) -> subprocess.Popen[bytes]:
    argv = ["nsenter", f"--net={node.netns}", sys.executable, "-m", "lair", "serve", "--db", db]
    argv += ["--host", node.address, "--port", str(PORT), "--workers", "1", "--no-seed"]
    argv += ["--blobs", "s3://lair-reports/blobs", "--allowed-host", "localhost"]
    if pin:
        argv = ["taskset", "-c", ",".join(map(str, sorted(app_cpus()))), *argv]
    if group is not None:  # the shell joins the group first: granian and its workers are born in it
        argv = ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh", *argv]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, env={**os.environ, **env}, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            start_new_session=True,
        )  # fmt: skip
    wait_http(f"http://{node.address}:{PORT}/api/v1/health", 60, proc)
    return proc


def _nginx(where: Path, upstreams: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    where.mkdir(parents=True, exist_ok=True)
    https = free_port()
    conf = nginx_conf(where, upstreams, https, free_port())
    (where / "lair-registry.conf").write_text(  # no log of wrk's hundreds of thousands of requests
        re.sub(r"access_log [^;]+;", "access_log off;", (where / "lair-registry.conf").read_text())
    )
    argv = [nginx_binary(), "-p", str(where), "-c", str(conf), "-g", "daemon off;"]
    proc = subprocess.Popen(argv, start_new_session=True)
    return proc, https


def measure(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="lair-two-hosts-"))
    runs: dict[str, dict[str, list[dict[str, float]]]] = {p: {"one": [], "two": []} for p in [*PATHS, COLD]}
    if args.pin:  # before any child starts: PostgreSQL, moto, nginx and wrk inherit CPU 0
        os.sched_setaffinity(0, {0})
    with NetnsNodes(2) as nodes:
        bridge = f"{nodes.subnet}.1"
        with pg_server(host=bridge) as pg, s3_server(host=bridge) as s3:
            prepare(pg.url)
            if args.slugs:
                seed(pg.url, args.slugs)
            s3.create_bucket("lair-reports")
            proxies = {
                "one": _nginx(tmp / "one", [f"{nodes.nodes[0].address}:{PORT}"]),
                "two": _nginx(tmp / "two", [f"{n.address}:{PORT}" for n in nodes.nodes]),
            }
            groups = [
                cpu_group(f"lair-bench-{n.name}", args.host_cores) if args.host_cores else None
                for n in nodes.nodes
            ]
            apps = [
                _serve(n, pg.url, s3.env, tmp / f"{n.name}.log", g, args.pin)
                for n, g in zip(nodes.nodes, groups, strict=True)
            ]
            try:
                for name, path in PATHS.items():
                    spread = (spread_paths(path, args.slugs), tmp) if args.slugs else None
                    for kind in ("one", "two"):  # warm-up: caches filled, connections open
                        base = f"https://localhost:{proxies[kind][1]}"
                        if spread is None:
                            wrk(base + path, 2, args.connections)
                        else:
                            wrk_paths(base, spread[0], 2, args.connections, tmp, "random")
                    for _ in range(args.runs):
                        for kind in ("one", "two"):
                            base, pids = f"https://localhost:{proxies[kind][1]}", [p.pid for p in apps]
                            url = base if spread else base + path
                            runs[name][kind].append(
                                _run(url, args, pids, proxies[kind][0].pid, spread=spread)
                            )
                count = 2 * args.runs + 2  # a slice of the pool per run and warm-up
                slices = iter(range(count))
                for kind in ("one", "two"):  # warm-up: the search code paths, on URLs of their own
                    wrk_paths(
                        f"https://localhost:{proxies[kind][1]}",
                        cold_paths(next(slices), count),
                        2,
                        args.connections,
                        tmp,
                    )
                for _ in range(args.runs):
                    for kind in ("one", "two"):
                        base, pids = f"https://localhost:{proxies[kind][1]}", [p.pid for p in apps]
                        cold = (cold_paths(next(slices), count), tmp)
                        runs[COLD][kind].append(_run(base, args, pids, proxies[kind][0].pid, cold))
            finally:
                for p in apps:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(30)
                for proc, _port in proxies.values():
                    proc.terminate()
                    proc.wait(15)
                for group in groups:
                    if group is not None:
                        group.rmdir()  # empty once its processes are gone
    return {"runs": runs, "median": {n: {k: _median(v) for k, v in r.items()} for n, r in runs.items()}}


def _median(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]}


def _sharing(args: argparse.Namespace) -> str:
    cores = os.cpu_count()
    if not args.host_cores:
        return f"{cores} CPU cores shared by nginx, wrk, PostgreSQL and both apps "
    capped = f"each host capped at {args.host_cores:g} of a core (cgroup quota), "
    if args.pin:
        return capped + "the hosts on CPUs 1+ and nginx, wrk, PostgreSQL and the object store on CPU 0 "
    return capped + f"the rest of the {cores} cores shared by nginx, wrk and PostgreSQL "


def render(result: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        "# Two app hosts behind nginx vs one (this machine)",
        "",
        f"wrk -t2 -c{args.connections} -d{args.seconds}s over https through nginx (1 worker, TLS), "
        f"median of {args.runs} alternating runs; each host a network namespace running "
        "`lair serve --workers 1` over one PostgreSQL and one S3 store; "
        + _sharing(args)
        + f"(load average {result['load_average']['before']:.1f} before the run, "
        f"{result['load_average']['after']:.1f} after: other work on the machine counts too).",
        "",
        "| request | one host req/s | two hosts req/s | ratio | one / two hosts p50 ms | one / two p99 ms "
        "| cores used by the apps, nginx: one host | two hosts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, m in result["median"].items():
        one, two = m["one"], m["two"]
        label = f"{name}, uniform over {args.slugs:,} recipes" if args.slugs and name in PATHS else name
        lines.append(
            f"| {label} | {one['rps']:,.0f} | {two['rps']:,.0f} | {two['rps'] / one['rps']:.2f}x | "
            f"{one['p50_ms']:.1f} / {two['p50_ms']:.1f} | {one['p99_ms']:.1f} / {two['p99_ms']:.1f} | "
            f"{one['app_cores']:.2f}, {one['nginx_cores']:.2f} | "
            f"{two['app_cores']:.2f}, {two['nginx_cores']:.2f} |"
        )
    lines += [
        "",
        "Cores used: CPU seconds of every process of the app hosts (granian and its workers) and of nginx",
        "during a run, divided by its length. When the two-host run's app cores are no higher than the",
        "one-host run's, the second process found no idle core to run on: the machine, not the app, was the",
        "limit. On separate machines each host brings its own cores (docs/deploy.md, Scaling to N hosts).",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--host-cores", type=float, default=0.0, help="each app host's CPU quota (0: none)")
    ap.add_argument("--slugs", type=int, default=0, help="JSON and page over N seeded recipes (0: one)")
    ap.add_argument("--pin", action="store_true", help="app hosts on CPUs 1+, everything else on CPU 0")
    args = ap.parse_args()
    load_before = os.getloadavg()
    result = measure(args)
    result["load_average"] = {"before": load_before[0], "after": os.getloadavg()[0]}
    table = render(result, args)
    print(table)
    OUT.mkdir(parents=True, exist_ok=True)
    name = "two_hosts"
    if args.host_cores:  # one file per set-up: runs of other set-ups are kept
        name += f"_{'pinned' if args.pin else 'capped'}_{args.host_cores:g}"
    name += "_spread" if args.slugs else ""
    (OUT / f"{name}.md").write_text(table)
    meta = {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version()}
    doc = {"benchmark": "two_hosts", "args": vars(args), "machine": meta} | result
    (OUT / f"{name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
