"""Streaming-client cost and accuracy: lair's bench vs guidellm vs aiperf, same server, same work.

    .venv/bin/python benchmarks/bench_client.py [--streams 16,256] [--token-ms 2]
        [--tools lair,guidellm,aiperf]

Every tool streams from one calibrated server (``lair.testing.calibrated_server``: true TTFT 200 ms,
one token per chunk every ``--token-ms``) at each concurrency, twice: a *big* run (max(64, streams)
requests of 1,024 output tokens) and a *small* one (same requests, 16 tokens). Per tool and
concurrency it reports:

- CPU-ms per 1,000 streamed tokens, from the tool's whole process tree (``RUSAGE_CHILDREN`` deltas;
  a child's workers are reaped by it, so they count): *total* = big run's CPU / its tokens,
  start-up included; *marginal* = (big - small CPU) / (big - small tokens), the cost of streaming
  itself with start-up and per-request costs cancelled out;
- output tokens/s, as the tool itself reports it (lair: aggregate decode while all streams run;
  guidellm and aiperf: output tokens / benchmark duration);
- TTFT p50 error: the tool's TTFT p50 minus the server's own p50 over the same requests (the server
  records each request's kernel receive time and its first content write).

Peers run from their own virtual environments under ``.bench/`` (created with ``pip install`` on first
use, Python 3.12 via pyenv); a peer that cannot be installed or run is reported as such, with the
reason, never with made-up numbers. Output: a table on stdout, JSON in ``benchmarks/out/bench_client.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out"
BENCH = ROOT / ".bench"
BIG, SMALL, PROMPT = 1024, 16, 64


def rounds(streams: int) -> int:
    """Requests per run = rounds x streams: at least 64 requests, so start-up cost is amortised."""
    return max(1, 64 // streams)


PEERS = {"guidellm": "guidellm", "aiperf": "aiperf"}
LAIR_STREAMING_CPU_S: dict[tuple[int, int], float] = {}
"""lair's own account of its CPU while streams were open (sending, reading), per (streams, tokens)."""


def _py312() -> str | None:
    for cand in sorted((Path.home() / ".pyenv" / "versions").glob("3.12*"), reverse=True):
        if (cand / "bin" / "python").exists():
            return str(cand / "bin" / "python")
    return shutil.which("python3.12")


def ensure_peer(name: str) -> tuple[Path | None, str]:
    """The peer's executable in ``.bench/<name>/``, installing it on first use; else (None, why)."""
    exe = BENCH / name / "bin" / name
    if exe.exists():
        return exe, ""
    py = _py312()
    if py is None:
        return None, "no Python 3.12 found to install it"
    venv = BENCH / name
    steps = [[py, "-m", "venv", str(venv)], [str(venv / "bin" / "pip"), "install", "-q", PEERS[name]]]
    for cmd in steps:
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            return None, f"`{' '.join(cmd)}` failed: {res.stderr.strip()[-300:]}"
    return (exe, "") if exe.exists() else (None, f"{exe} missing after install")


def children_cpu_s() -> tuple[float, float]:
    """(user, system) CPU seconds of the reaped children so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime, ru.ru_stime


def server_stats(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(url + "/stats", timeout=30) as r:
        data: list[dict[str, Any]] = json.loads(r.read())
    return data


LAST_SYS_S: list[float] = [0.0]
"""System (kernel) CPU seconds of the last measured command, apart."""


def run_measured(cmd: list[str], cwd: Path, timeout: float = 900) -> tuple[float, float, str]:
    """(CPU seconds of the process tree, wall seconds, output tail) of one command."""
    (user0, sys0), t0 = children_cpu_s(), time.perf_counter()
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    (user1, sys1), wall = children_cpu_s(), time.perf_counter() - t0
    cpu, LAST_SYS_S[0] = user1 - user0 + sys1 - sys0, sys1 - sys0
    if res.returncode != 0:
        raise RuntimeError(f"exit {res.returncode}: {(res.stderr or res.stdout).strip()[-600:]}")
    return cpu, wall, res.stdout


# ---- one function per tool: run the workload, return (ttft_p50_ms, output_tok_s) from its own output


def lair_run(url: str, streams: int, tokens: int, work: Path) -> tuple[float, float, float, float]:
    cmd = [sys.executable, "-m", "lair", "bench", url, "--model", "calibrated", "--contexts", str(PROMPT)]
    cmd += [
        "--concurrency",
        str(streams),
        "--decode-tokens",
        str(tokens),
        "--repeat",
        str(rounds(streams)),
        "--json",
    ]
    cpu, wall, out = run_measured(cmd, work)
    cell = json.loads(out)["cells"][0]
    LAIR_STREAMING_CPU_S[(streams, tokens)] = cell["client"]["cpu_s"]
    return cpu, wall, cell["ttft_ms_p50"], cell["decode_tok_s_aggregate"]


def guidellm_run(url: str, streams: int, tokens: int, work: Path) -> tuple[float, float, float, float]:
    spec = {
        "backend": {"kind": "openai_http", "target": url, "model": "calibrated",
                    "request_format": "/v1/chat/completions"},
        "profile": {"kind": "concurrent", "streams": streams},
        "data": [{"kind": "synthetic_text", "prompt_tokens": PROMPT, "output_tokens": tokens}],
        "constraints": [{"kind": "max_requests", "count": rounds(streams) * streams}],
        "tokenizer": {"kind": "hf_auto", "model": str(work / "model" / "hf")},
        "outputs": [{"kind": "json", "path": str(work / "guidellm.json")}],
    }  # fmt: skip
    (work / "scenario.json").write_text(json.dumps({"spec": spec}))
    exe = str(BENCH / "guidellm" / "bin" / "guidellm")
    cmd = [exe, "run", "--scenario", str(work / "scenario.json"), "--disable-console-interactive"]
    cpu, wall, _ = run_measured(cmd, work)
    m = json.loads((work / "guidellm.json").read_text())["benchmarks"][0]["metrics"]
    ttft = m["time_to_first_token_ms"]["successful"]["median"]
    return cpu, wall, ttft, m["output_tokens_per_second"]["successful"]["mean"]


def aiperf_run(url: str, streams: int, tokens: int, work: Path) -> tuple[float, float, float, float]:
    exe = str(BENCH / "aiperf" / "bin" / "aiperf")
    cmd = [exe, "profile", "--model", "calibrated", "--url", url, "--endpoint-type", "chat", "--streaming"]
    cmd += [
        "--concurrency",
        str(streams),
        "--request-count",
        str(rounds(streams) * streams),
        "--ui-type",
        "none",
    ]
    cmd += ["--synthetic-input-tokens-mean", str(PROMPT), "--output-tokens-mean", str(tokens)]
    cmd += ["--tokenizer", str(work / "model" / "hf"), "--use-server-token-count"]
    cmd += ["--extra-inputs", "ignore_eos:true", "--artifact-dir", str(work / "aiperf")]
    cpu, wall, _ = run_measured(cmd, work)
    d = json.loads((work / "aiperf" / "profile_export_aiperf.json").read_text())
    return cpu, wall, d["time_to_first_token"]["p50"], d["output_token_throughput"]["avg"]


TOOLS: dict[str, Callable[[str, int, int, Path], tuple[float, float, float, float]]] = {
    "lair": lair_run,
    "guidellm": guidellm_run,
    "aiperf": aiperf_run,
}


def measure(tool: str, url: str, streams: int, work: Path) -> dict[str, Any]:
    """Small and big runs of one tool at one concurrency."""
    res: dict[str, Any] = {"tool": tool, "streams": streams}
    runs = {}
    for tokens in (SMALL, BIG):
        mark = len(server_stats(url))
        cpu, wall, ttft, tok_s = TOOLS[tool](url, streams, tokens, work)
        served = [s for s in server_stats(url)[mark:] if s["tokens"] == tokens]
        true_ttft = statistics.median((s["first_write_t"] - s["recv_t"]) * 1000 for s in served)
        runs[tokens] = {"cpu_s": cpu, "cpu_sys_s": LAST_SYS_S[0], "wall_s": wall, "ttft_p50_ms": ttft,
                        "true_ttft_p50_ms": true_ttft, "output_tok_s": tok_s,
                        "tokens": len(served) * tokens}  # fmt: skip
    big, small = runs[BIG], runs[SMALL]
    res["runs"] = runs
    res["cpu_ms_per_1k_total"] = big["cpu_s"] * 1e6 / big["tokens"]
    res["cpu_ms_per_1k_marginal"] = (big["cpu_s"] - small["cpu_s"]) * 1e6 / (big["tokens"] - small["tokens"])
    sys_s = big["cpu_sys_s"] - small["cpu_sys_s"]
    res["cpu_ms_per_1k_marginal_sys"] = sys_s * 1e6 / (big["tokens"] - small["tokens"])
    res["output_tok_s"] = big["output_tok_s"]
    res["ttft_p50_error_ms"] = big["ttft_p50_ms"] - big["true_ttft_p50_ms"]
    if tool == "lair":  # the split: reading the streams vs everything after (parsing, statistics)
        s_big, s_small = LAIR_STREAMING_CPU_S[(streams, BIG)], LAIR_STREAMING_CPU_S[(streams, SMALL)]
        res["cpu_ms_per_1k_streaming_marginal"] = (s_big - s_small) * 1e6 / (big["tokens"] - small["tokens"])
    return res


def table(results: list[dict[str, Any]]) -> str:
    cols = ["tool", "streams", "CPU-ms/1k tok (marginal)", "CPU-ms/1k tok (total)", "output tok/s"]
    lines = ["| " + " | ".join([*cols, "TTFT p50 error ms"]) + " |", "|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['tool']} | {r['streams']} | n/a: {r['error'][:90]} | | | |")
            continue
        cpu = f"{r['cpu_ms_per_1k_marginal']:.1f} | {r['cpu_ms_per_1k_total']:.1f}"
        rest = f"{r['output_tok_s']:,.0f} | {r['ttft_p50_error_ms']:+.2f}"
        lines.append(f"| {r['tool']} | {r['streams']} | {cpu} | {rest} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="16,256")
    ap.add_argument("--token-ms", default="2")
    ap.add_argument("--tools", default="lair,guidellm,aiperf")
    a = ap.parse_args()
    from lair.testing.calibrated_server import running_server
    from lair.testing.tiny_model import make_tiny_model

    work = OUT / "bench_client"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    make_tiny_model(work / "model")  # the peers need a local Hugging Face tokenizer folder
    # HF_HUB_OFFLINE=1 makes aiperf's dataset worker read the local tokenizer path as a hub repo id
    os.environ.pop("HF_HUB_OFFLINE", None)
    results: list[dict[str, Any]] = []
    with running_server("--ttft-ms", "200", "--token-ms", a.token_ms) as url:
        for streams in (int(s) for s in a.streams.split(",")):
            for tool in a.tools.split(","):
                print(f"== {tool} at {streams} streams", file=sys.stderr, flush=True)
                results.append(_one(tool, url, streams, work))
    print(table(results))
    for r in results:
        if "cpu_ms_per_1k_streaming_marginal" in r:
            print(
                f"lair at {r['streams']} streams: {r['cpu_ms_per_1k_streaming_marginal']:.1f} CPU-ms/1k tok "
                "while streams are open (send + read), the rest is parsing and statistics after the "
                f"cell; {r['cpu_ms_per_1k_marginal_sys']:.1f} of the marginal is kernel time"
            )
    doc = {"server": {"ttft_ms": 200, "token_ms": float(a.token_ms)}, "results": results}
    (OUT / "bench_client.json").write_text(json.dumps(doc, indent=2) + "\n")
    return 0


def _one(tool: str, url: str, streams: int, work: Path) -> dict[str, Any]:
    if tool in PEERS:
        exe, why = ensure_peer(tool)
        if exe is None:
            return {"tool": tool, "streams": streams, "error": f"cannot install: {why}"}
    try:
        return measure(tool, url, streams, work)
    except (RuntimeError, subprocess.TimeoutExpired, KeyError, ValueError, OSError) as exc:
        return {"tool": tool, "streams": streams, "error": f"{type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    raise SystemExit(main())
