"""Launch overhead: lair's own time from the command to the engine process start, minus the engine's
own start; and hook fan-out across nodes.

    sudo .venv/bin/python benchmarks/launch_overhead.py [--runs 5]      # SSH parts need root (netns nodes)

* local (native runtime, this machine): ``lair launch --detach`` as a subprocess; the "engine" is a
  stdlib HTTP server whose first statement writes ``time.time()`` to a file. Overhead = (that
  timestamp - the moment the command was spawned) - the engine's own start (the same engine spawned
  directly, spawn -> first statement).
* ssh 2 nodes: the same over SSH to 2 network-namespace nodes (sshd each); overhead uses the later
  of the two engine starts.
* fan-out: ``before_serve = sleep 1`` on 4 SSH nodes; the before_serve stage's wall time from lair's
  progress lines (first hook start to last hook end) must be about 1 s, not 4.

Prints a table and writes every sample to ``benchmarks/out/launch_overhead.json``. Targets:
overhead < 0.5 s local, < 1.5 s over SSH for 2 nodes; fan-out < 1.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
ENGINE = """
import http.server, os, sys, time
open(sys.argv[1] + "/start-" + os.environ.get("LAIR_NODE_RANK", "x"), "w").write(repr(time.time()))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a): pass
http.server.HTTPServer(("0.0.0.0", int(sys.argv[2])), H).serve_forever()
"""
RECIPE = """
engine = "custom"
runtime = "native"
name = "launch overhead"
required_nodes = {n}
pipeline_parallel_size = {n}
distributed_backend = "mp"
port = {port}
ready_timeout_s = 60
entrypoint = ["{py}", "{engine}", "{marks}", "{port}"]
before_serve = [{hooks}]
"""
TARGETS = {"local": 0.5, "ssh-2": 1.5, "fanout-4": 1.5}


def lair(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LAIR_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "lair", *args], capture_output=True, text=True, env=env, timeout=300
    )


def engine_own_start(work: Path, runs: int) -> list[float]:
    """Spawn -> first statement of the engine, started directly (what the engine itself costs)."""
    out = []
    for i in range(runs):
        marks = work / f"direct-{i}"
        marks.mkdir()
        t0 = time.time()
        p = subprocess.Popen([sys.executable, str(work / "engine.py"), str(marks), "0"])
        start = wait_file(marks / "start-x")
        p.terminate()
        p.wait()
        out.append(start - t0)
    return out


def wait_file(p: Path, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.exists() and p.read_text():
            return float(p.read_text())
        time.sleep(0.005)
    raise TimeoutError(p)


def one_launch(
    home: Path, work: Path, tag: str, n: int, port: int, extra: list[str], hooks: str = ""
) -> dict[str, object]:
    marks = work / tag
    marks.mkdir()
    recipe = work / f"{tag}.toml"
    recipe.write_text(
        RECIPE.format(n=n, port=port, py=sys.executable, engine=work / "engine.py", marks=marks, hooks=hooks)
    )
    t0 = time.time()
    res = lair(home, "launch", str(recipe), "--detach", *extra)
    if res.returncode != 0:
        raise RuntimeError(res.stderr)
    starts = [wait_file(marks / f"start-{r}") for r in range(n)]
    run_id = res.stdout.strip()
    stop = lair(home, "stop", run_id)
    if stop.returncode != 0:
        raise RuntimeError(stop.stderr)
    return {"to_engine_start_s": max(starts) - t0, "progress": res.stderr}


def hook_stage_wall(progress: str) -> float:
    """First hook start to last hook end, from lines like ``[  1.23s] n1: hook: sleep 1 (1.01s)``."""
    spans = [
        (float(end) - float(dur), float(end))
        for end, dur in re.findall(r"\[\s*([\d.]+)s\] [^:]+: hook: [^(]*\(([\d.]+)s\)", progress)
    ]
    return max(e for _, e in spans) - min(s for s, _ in spans)


def measure(
    name: str, runs: int, fn: Callable[[int], dict[str, object]], own: float, results: dict[str, object]
) -> None:
    samples = [fn(i) for i in range(runs)]
    if name.startswith("fanout"):
        vals = [hook_stage_wall(str(s["progress"])) for s in samples]
        sums = [
            sum(float(d) for d in re.findall(r": hook: [^(]*\(([\d.]+)s\)", str(s["progress"])))
            for s in samples
        ]
        results["fanout-4-serial-sum"] = {"samples_s": sums, "median_s": statistics.median(sums)}
    else:
        vals = [float(s["to_engine_start_s"]) - own for s in samples]  # type: ignore[arg-type]
    results[name] = {"samples_s": vals, "median_s": statistics.median(vals), "target_s": TARGETS[name]}


def ssh_parts(home: Path, work: Path, runs: int, own: float, results: dict[str, object]) -> None:
    from lair.testing.nodes import NetnsNodes

    with NetnsNodes(4) as nodes:
        env = os.environ.copy()
        os.environ["LAIR_HOME"] = str(home)
        try:
            nodes.write_cluster("bench")
        finally:
            os.environ.clear()
            os.environ.update(env)
        two = ",".join(n.address for n in nodes.nodes[:2])
        four = ",".join(n.address for n in nodes.nodes)
        measure(
            "ssh-2",
            runs,
            lambda i: one_launch(home, work, f"ssh-{i}", 2, 18000, ["--nodes", two]),
            own,
            results,
        )
        hooks = '{ run = "sleep 1" }'
        measure(
            "fanout-4",
            runs,
            lambda i: one_launch(home, work, f"fan-{i}", 4, 18001, ["--nodes", four], hooks),
            own,
            results,
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--local-only", action="store_true")
    a = ap.parse_args()
    results: dict[str, object] = {"loadavg_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="lair-bench-launch-") as d:
        work, home = Path(d), Path(d) / "home"
        (work / "engine.py").write_text(ENGINE)
        own_samples = engine_own_start(work, a.runs)
        own = statistics.median(own_samples)
        results["engine_own_start"] = {"samples_s": own_samples, "median_s": own}
        lair(home, "--help")  # warm the bytecode cache
        measure("local", a.runs, lambda i: one_launch(home, work, f"local-{i}", 1, 18002, []), own, results)
        if not a.local_only:
            ssh_parts(home, work, a.runs, own, results)
    results["loadavg_after"] = os.getloadavg()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "launch_overhead.json").write_text(json.dumps(results, indent=2) + "\n")
    print(
        f"engine's own start (median of {a.runs}): {own * 1000:.0f} ms; load average before/after: "
        f"{results['loadavg_before'][0]:.1f}/{results['loadavg_after'][0]:.1f} on {os.cpu_count()} cores"
    )
    print(f"| {'measure':<30} | {'median':>8} | {'min':>8} | {'max':>8} | {'target':>8} | ok |")
    print(f"|{'-' * 32}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 10}|----|")
    labels = {
        "local": "overhead, local (native)",
        "ssh-2": "overhead, SSH 2 nodes",
        "fanout-4": "1 s hooks on 4 nodes (wall)",
    }
    for key, label in labels.items():
        r = results.get(key)
        if isinstance(r, dict):
            s = r["samples_s"]
            ok = "yes" if r["median_s"] < r["target_s"] else "NO"
            cells = f"{r['median_s']:>7.3f}s | {min(s):>7.3f}s | {max(s):>7.3f}s | <{r['target_s']:>6.1f}s"
            print(f"| {label:<30} | {cells} | {ok:<2} |")
    serial = results.get("fanout-4-serial-sum")
    if isinstance(serial, dict):
        print(
            f"(the 4 hooks' own durations add up to {serial['median_s']:.2f}s: "
            "one after another they would take that long)"
        )
    print(f"samples: {OUT / 'launch_overhead.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
