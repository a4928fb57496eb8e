"""Load test of the registry: 10,000 recipes and 50,000 measurements, 32 connections, from wrk.

    python benchmarks/registry_load.py --db sqlite            # or --db postgresql, or --db both
    python benchmarks/registry_load.py --mode both            # also the uncached (render every request) path

Seeds a fresh database (SQLite file in a temp dir; a PostgreSQL database of its own on
``LAIR_TEST_PG``'s server, dropped afterwards) through the service layer's bulk import, starts
``lair serve --workers N`` and runs wrk (Debian's, C, not CPU-bound itself) against three endpoints:

- recipe JSON: ``/api/v1/recipes/<slug>.json`` over 1,000 different recipes;
- recipe page: ``/recipes/<slug>`` over the same 1,000;
- filtered search, 20 hits: ``/api/v1/recipes?gpu=..&min_context=..&limit=20`` over 60 filter combinations;
- verified sort, 20 hits: ``/api/v1/recipes?verified=1&sort=decode[&gpu=..][&context=..]&limit=20`` over 42
  combinations (a quarter of the recipes have 2 verified rows each; held to the filtered search's targets).

Each endpoint is warmed up (every URL once), then loaded for ``--seconds``. Prints req/s, p50, p99
and the ratio to the targets, and writes everything to ``benchmarks/out/registry_load.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LUA = ROOT / "benchmarks" / "data" / "registry_wrk.lua"
OUT = ROOT / "benchmarks" / "out"
GPUS = [
    ("H200", 141),
    ("RTX PRO 6000", 96),
    ("RTX 4090", 24),
    ("A100 80GB", 80),
    ("RTX 5090", 32),
    ("L40S", 48),
]
ENGINES = ["vllm", "sglang", "llamacpp"]
TAGS = [
    "chat",
    "code",
    "vision",
    "long-context",
    "fp8",
    "awq",
    "moe",
    "tp2",
    "speculative",
    "community-recipe",
]
CONTEXTS = [2048, 8192, 32768, 65536, 131072]
TARGETS = {  # req/s, p99 ms
    "sqlite": {"recipe_json": (10000, 10), "recipe_page": (5000, 20), "search": (2000, 40)},
    "postgresql": {"recipe_json": (5000, 20), "recipe_page": (3000, 30), "search": (800, 100)},
}
for _kind in TARGETS.values():
    _kind["verified_sort"] = _kind["search"]


def synthetic_recipe(i: int, rng: random.Random) -> str:
    gpu, vram = GPUS[i % len(GPUS)]
    count = [1, 2, 4, 8][(i // len(GPUS)) % 4]
    tags = rng.sample(TAGS, 3)
    ctx = [32768, 65536, 131072, 262144, 1048576][i % 5]
    perf = "".join(
        f"\n[[meta.performance]]\ncontext = {c}\nconcurrency = {1 + (k % 2) * 3}\n"
        f"decode_tok_s = {round(rng.uniform(20, 300), 1)}\n"
        f"prefill_tok_s = {round(rng.uniform(1000, 20000), 1)}\n"
        for k, c in enumerate(CONTEXTS)
    )
    return f'''engine = "{ENGINES[i % 3]}"
docker_image = "vllm/vllm-openai:v0.11.{i % 7}-cu12{i % 10}"
model = "org/model-{i % 500}"
tensor_parallel_size = {count}
args = ["--max-model-len", "{ctx}", "--gpu-memory-utilization", "0.9"]
[env]
VLLM_LOGGING_LEVEL = "INFO"
[meta]
title = "Model {i % 500} on {count}x {gpu} ({ENGINES[i % 3]}) #{i}"
slug = "bench-{i}"
summary = "Synthetic recipe {i}: model {i % 500} served by {ENGINES[i % 3]} on {count}x {gpu}, context {ctx}."
tags = {json.dumps(tags)}
license = "MIT"
max_context = {ctx}
notes = "Generated for the registry load benchmark."
[meta.hardware]
gpu_model = "{gpu}"
gpu_count = {count}
vram_gb = {vram}
{perf}'''


def seed(url: str, n: int) -> float:
    from lair.registry.db.engine import make_engine, migrate
    from lair.registry.service.canonical import parse_recipe
    from lair.registry.service.publish import publish_many

    rng = random.Random(7)
    t0 = time.monotonic()
    engine = make_engine(url)
    migrate(engine)
    template = parse_recipe(synthetic_recipe(0, rng))  # one full located check; the rest are the same shape
    assert template.meta.slug == "bench-0"
    from lair.registry.service.canonical import recipe_from_canonical

    batch = []
    for i in range(n):
        batch.append((f"bench-{i}", recipe_from_canonical(synthetic_recipe(i, rng))))
    with engine.begin() as conn:
        for k in range(0, n, 1000):
            publish_many(conn, batch[k : k + 1000], owner="bench")
        verify_some(conn)
    engine.dispose()
    return time.monotonic() - t0


def verify_some(conn: Any) -> None:
    """Every 4th recipe's rows at 8K and 64K become verified (as if a report had been accepted)."""
    import sqlalchemy as sa

    from lair.registry.service.publish import MEASUREMENTS as M
    from lair.registry.service.speeds import refresh_speeds

    picked = sa.and_(M.c.recipe_id % 4 == 0, M.c.context.in_([8192, 65536]))
    conn.execute(sa.update(M).where(picked).values(provenance="verified", rig_fingerprint="bench-rig"))
    for rid in conn.execute(sa.select(M.c.recipe_id).where(picked).distinct()).scalars().all():
        refresh_speeds(conn, rid)


def paths_for(n: int) -> dict[str, list[str]]:
    rng = random.Random(3)
    slugs = [f"bench-{i}" for i in rng.sample(range(n), 1000)]
    searches = []
    for gpu, _ in GPUS:
        for ctx in (32768, 65536):
            for tag in TAGS[:5]:
                searches.append(
                    f"/api/v1/recipes?gpu={gpu.replace(' ', '+')}&min_context={ctx}&tag={tag}&limit=20"
                )
    verified = [
        "/api/v1/recipes?verified=1&sort=decode&limit=20"
        + (f"&gpu={gpu.replace(' ', '+')}" if gpu else "")
        + (f"&context={ctx}" if ctx else "")
        for gpu in [None, *(g for g, _ in GPUS)]
        for ctx in [None, *CONTEXTS]
    ]
    return {
        "recipe_json": [f"/api/v1/recipes/{s}.json" for s in slugs],
        "recipe_page": [f"/recipes/{s}" for s in slugs],
        "search": searches,
        "verified_sort": verified,
    }


def warm(base: str, paths: list[str]) -> int:
    hits = 0
    for p in paths:
        with urllib.request.urlopen(base + p, timeout=30) as r:
            body = r.read()
            if p.startswith("/api/v1/recipes?"):
                hits += json.loads(body)["count"]
    return hits


def run_wrk(
    base: str, paths: list[str], seconds: int, conns: int, threads: int, tmp: Path
) -> dict[str, float]:
    listing = tmp / "paths.txt"
    listing.write_text("\n".join(paths) + "\n")
    argv = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--timeout", "5s", "-s", str(LUA), base]
    out = subprocess.run(
        argv, capture_output=True, text=True, env=os.environ | {"WRK_PATHS": str(listing)}, check=True
    )
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        "req_s": round(res["requests"] / (res["duration_us"] / 1e6), 1),
        "p50_ms": res["p50_us"] / 1000,
        "p90_ms": res["p90_us"] / 1000,
        "p99_ms": res["p99_us"] / 1000,
        "max_ms": res["max_us"] / 1000,
        "requests": res["requests"],
        "errors": res["socket_errors"] + res["non_2xx"],
    }


def bench_db(kind: str, args: argparse.Namespace, stack: ExitStack, tmp: Path) -> dict[str, object]:
    from lair.testing.registry import pg_database, serve_process

    url = f"sqlite:///{tmp / 'bench.sqlite3'}" if kind == "sqlite" else stack.enter_context(pg_database())
    seeded = seed(url, args.recipes)
    print(
        f"[{kind}] seeded {args.recipes} recipes, {args.recipes * len(CONTEXTS)} measurements "
        f"in {seeded:.1f} s",
        file=sys.stderr,
    )
    results: dict[str, object] = {"seed_s": round(seeded, 1)}
    modes = [
        (m, None if m == "cached" else "0")
        for m in (["cached", "uncached"] if args.mode == "both" else [args.mode])
    ]
    for mode, cache_mb in modes:
        env = {"LAIR_REGISTRY_CACHE_MB": cache_mb} if cache_mb is not None else {}
        os.environ.update(env)
        try:
            with serve_process(
                url, workers=args.workers, seed=False, log=tmp / f"serve-{kind}-{mode}.log"
            ) as base:
                for name, paths in paths_for(args.recipes).items():
                    hits = warm(base, paths)
                    r = run_wrk(base, paths, args.seconds, args.connections, args.threads, tmp)
                    if name in ("search", "verified_sort"):
                        r["hits_per_query"] = round(hits / len(paths), 1)
                    results[f"{mode}:{name}"] = r
                    print(
                        f"[{kind}] {mode:8} {name:12} {r['req_s']:>9,.0f} req/s  p50 {r['p50_ms']:6.2f} ms  "
                        f"p99 {r['p99_ms']:6.2f} ms  errors {r['errors']}",
                        file=sys.stderr,
                    )
        finally:
            for k in env:
                os.environ.pop(k, None)
    return results


def table(all_results: dict[str, dict[str, object]]) -> str:
    lines = [
        "| DB | mode | endpoint | req/s | p50 ms | p99 ms | target req/s, p99 | req/s ratio | p99 ratio |",
        "|" + "---|" * 9,
    ]
    for kind, res in all_results.items():
        for key, r in res.items():
            if ":" not in key:
                continue
            mode, name = key.split(":")
            assert isinstance(r, dict)
            want_rps, want_p99 = TARGETS[kind][name]
            lines.append(
                f"| {kind} | {mode} | {name} | {r['req_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                f">= {want_rps:,}, <= {want_p99} ms | {r['req_s'] / want_rps:.2f} | "
                f"{want_p99 / max(r['p99_ms'], 1e-3):.2f} |"
            )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--recipes", type=int, default=10000)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument(
        "--workers", type=int, default=1, help="lair serve worker processes (1 leaves a core to wrk)"
    )
    ap.add_argument(
        "--mode",
        choices=["cached", "uncached", "both"],
        default="cached",
        help="uncached: the response cache off",
    )
    ap.add_argument("--out", type=Path, default=OUT / "registry_load.json")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        print("wrk not found: apt-get install wrk (or bash scripts/registry-setup.sh)", file=sys.stderr)
        return 2
    kinds = ["sqlite", "postgresql"] if args.db == "both" else [args.db]
    results: dict[str, dict[str, object]] = {}
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="lair-regload-") as tmp:
        for kind in kinds:
            results[kind] = bench_db(kind, args, stack, Path(tmp))
    print(table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"args": vars(args) | {"out": str(args.out)}, "targets": TARGETS, "results": results}, indent=2
        )
    )
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
