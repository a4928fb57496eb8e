"""Load test of the registry on a live site: reads under writes, every slug, and the anchors beside it.

    python benchmarks/registry_load.py --db sqlite --recipes 10000        # or --db postgresql / both
    python benchmarks/registry_load.py --db sqlite --recipes 1000,10000,100000 --only growth
    python benchmarks/registry_load.py --db both --cases recipe_json@10,search@10 --out ...  # a subset

Seeds a fresh database (a SQLite file in a temp dir; a PostgreSQL database of its own on
``LAIR_TEST_PG``'s server, dropped afterwards) through the service layer's bulk import, which renders
every recipe's stored documents (timed apart: ``render_s``), starts ``lair serve`` (1 worker) and
runs wrk (Debian's, C) with a Lua script that picks a random path per request:

- recipe JSON and page: ``/api/v1/recipes/<slug>.json``, ``/recipes/<slug>`` over EVERY slug (cold
  spread: no URL is warmed), with 0, 1, 10 and 50 writes/s (JSON) or 0 and 10 (page) going through the
  real API meanwhile: votes and unvotes from 50 accounts, every tenth write a revision by the owner;
  each write's latency is recorded (``write_p50_ms``, ``write_p99_ms``; a case with writes lasts at
  least ``WRITE_CASE_S``, 20 s);
- filtered search, 20 hits (60 filter combinations) at 0 and 10 writes/s; text search (``q=``, 40
  queries) at 32 connections and at 1 connection (its median is the 100k target); the verified sort;
- growth (``--only growth``): past ``--grow-from`` (10k) recipes the catalogue is copied up to the size
  (:func:`grow`), and the server runs with ``LAIR_REGISTRY_CACHE_MB=0``, so each search runs its
  query: recipe JSON and filtered search at 10 writes/s, text search at 32 connections and at 1 (its
  median is the 100k target);
- RSS: the worker's VmRSS after a pass over 100,000 distinct URLs (every list, search and page shape);
- anchors, same file, same run: a 30-line Starlette + sqlite3 route (``registry_anchor.py``, granian, 1
  worker; the recipe's row, latest revision and measurements as orjson) and datasette's row JSON
  (datasette in its own venv under ``~/.cache/lair-bench/datasette``; skipped, saying why, without it).

Prints a table and writes it with the JSON under ``benchmarks/results/registry_load.{md,json}``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LUA = ROOT / "benchmarks" / "data" / "registry_wrk.lua"
OUT = ROOT / "benchmarks" / "results"
DATASETTE = Path.home() / ".cache" / "lair-bench" / "datasette" / "bin" / "datasette"
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
SPEED_SETS = 24
"""Distinct sets of speed rows the synthetic recipes draw from, one per GPU model and count (``i % 24``
fixes both): a chart is drawn once per set and rig it shows (about 0.12 s each, kept in chart_svgs), so
the catalogue draws 48 charts (24 of them with verified rows); a real catalogue draws one per write
that changes a recipe's rows."""
TARGETS = {  # req/s, p99 ms (None: no p99 target)
    "sqlite": {"recipe_json@10": (5000, 15), "recipe_page@10": (3000, None), "search@10": (1500, 40)},
    "postgresql": {"recipe_json@10": (3000, None), "recipe_page@10": (2000, None), "search@10": (800, None)},
}
WRITE_P99_MS = 50
TEXT_MEDIAN_MS = 10
RSS_MB = 300


def synthetic_recipe(i: int, rng: random.Random) -> str:
    gpu, vram = GPUS[i % len(GPUS)]
    count = [1, 2, 4, 8][(i // len(GPUS)) % 4]
    tags = rng.sample(TAGS, 3)
    ctx = [32768, 65536, 131072, 262144, 1048576][i % 5]
    speeds = random.Random(i % SPEED_SETS)
    perf = "".join(
        f"\n[[meta.performance]]\ncontext = {c}\nconcurrency = {1 + (k % 2) * 3}\n"
        f"decode_tok_s = {round(speeds.uniform(20, 300), 1)}\n"
        f"prefill_tok_s = {round(speeds.uniform(1000, 20000), 1)}\n"
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


def seed(url: str, n: int) -> dict[str, float]:
    """The catalogue, bulk-imported (documents rendered as it goes) and every 4th recipe's rows at 8K
    and 64K made verified (documents rendered again); seconds of each step."""
    import sqlalchemy as sa

    from lair.registry.db.engine import make_engine, migrate
    from lair.registry.service.canonical import parse_recipe, recipe_from_canonical
    from lair.registry.service.publish import publish_many
    from lair.registry.service.stored import renderer

    rng = random.Random(7)
    t0 = time.monotonic()
    engine = make_engine(url)
    migrate(engine)
    template = parse_recipe(synthetic_recipe(0, rng))  # one full located check; the rest are the same shape
    assert template.meta.slug == "bench-0"
    batch = [(f"bench-{i}", recipe_from_canonical(synthetic_recipe(i, rng))) for i in range(n)]
    for k in range(0, n, 1000):
        with engine.begin() as conn:
            publish_many(conn, batch[k : k + 1000], owner="bench")
    t1 = time.monotonic()
    with engine.begin() as conn:
        verify_some(conn)
        # every document was rendered by this build as it went: no restyle when lair serve starts
        conn.execute(sa.text("UPDATE registry_version SET renderer = :r"), {"r": renderer()})
    t2 = time.monotonic()
    if engine.dialect.name == "postgresql":  # what autovacuum would have done by now (the test
        with engine.begin() as conn:  # server runs without it: no statistics, 15 ms search plans)
            conn.exec_driver_sql("ANALYZE")
    engine.dispose()
    return {"seed_and_render_s": round(t1 - t0, 1), "verify_and_render_s": round(t2 - t1, 1)}


def seeded_from_cache(url: str, n: int, cache: Path | None) -> dict[str, float]:
    """:func:`seed`, or a copy of the file an earlier run of the same source tree seeded (``--seed-cache``:
    repeated runs of one build; the key is the git trees of the service and
    database packages and this file's edits, so an edit there seeds again)."""
    if cache is None:
        return seed(url, n)
    from lair.registry.db.engine import sqlite_path

    tree = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD:src/lair/registry/service", "HEAD:src/lair/registry/db"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dirty = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "diff",
            "HEAD",
            "--",
            "src/lair/registry/service",
            "src/lair/registry/db",
            __file__,
        ],
        capture_output=True,
        check=True,
    ).stdout
    key = f"{hashlib.sha256(tree.encode()).hexdigest()[:12]}-{hashlib.sha256(dirty).hexdigest()[:12]}"
    kept = cache / f"seed-{n}-{key}.sqlite3"
    meta = kept.with_suffix(".json")
    if kept.exists() and meta.exists():
        shutil.copyfile(kept, sqlite_path(url))
        return json.loads(meta.read_text()) | {"seeded_from": kept.name}
    seeded = seed(url, n)
    cache.mkdir(parents=True, exist_ok=True)
    import sqlite3

    with sqlite3.connect(sqlite_path(url)) as src, sqlite3.connect(kept) as dst:
        src.backup(dst)
    meta.write_text(json.dumps(seeded))
    return seeded


def verify_some(conn: Any) -> None:
    """Every 4th recipe's rows at 8K and 64K become verified (as if a report had been accepted)."""
    import sqlalchemy as sa

    from lair.registry.db.tables import MEASUREMENTS as M
    from lair.registry.service.speeds import refresh_speeds
    from lair.registry.service.stored import changed

    picked = sa.and_(M.c.recipe_id % 4 == 0, M.c.context.in_([8192, 65536]))
    conn.execute(sa.update(M).where(picked).values(provenance="verified", rig_fingerprint="bench-rig"))
    ids = list(conn.execute(sa.select(M.c.recipe_id).where(picked).distinct()).scalars())
    for rid in ids:
        refresh_speeds(conn, rid)
    changed(conn, ids)  # as the report's write would: their documents rendered again


GROW_FROM = 10_000
"""Past this many recipes the growth run seeds ``GROW_FROM`` and copies them (:func:`grow`)."""


def grow(url: str, n0: int, n: int) -> float:
    """Copies of the first ``n0`` recipes until there are ``n``: every row of a recipe (revisions,
    measurements, tags, stored documents, its text index) again under ``bench-<i>`` for
    ``i`` in ``n0..n-1``, ids shifted by whole multiples of each table's largest id. Seeding 100k
    recipes through the service layer takes an hour on this machine; the copies have the same text
    and facets as their originals, so each search matches ten times the rows (no easier than a
    catalogue of 100k distinct recipes). Returns the seconds it took."""
    import sqlalchemy as sa

    from lair.registry.db.engine import make_engine
    from lair.registry.db.tables import MEASUREMENTS, RECIPES, REVISIONS, TAGS
    from lair.registry.service.stored import DOCUMENTS

    t0 = time.monotonic()
    engine = make_engine(url)
    with engine.begin() as conn:
        top = {
            t.name: conn.execute(sa.select(sa.func.max(t.c.id))).scalar_one()
            for t in (RECIPES, REVISIONS, MEASUREMENTS)
        }
        assert top["recipes"] == n0, top
        for k in range(1, -(-n // n0)):
            count = min(n0, n - k * n0)
            off = {name: k * v for name, v in top.items()}

            def moved(table: sa.Table, keep: Any, off: dict[str, int] = off, k: int = k) -> None:
                cols = [c for c in table.c if c.computed is None]
                exprs = []
                for c in cols:
                    if c.name == "id":
                        exprs.append(c + off[table.name])
                    elif c.name == "recipe_id":
                        exprs.append(c + off["recipes"])
                    elif c.name == "revision_id":
                        exprs.append(c + off["revisions"])
                    elif c.name == "slug":
                        exprs.append(
                            sa.literal("bench-")
                            + sa.cast(sa.cast(sa.func.substr(c, 7), sa.Integer) + k * n0, sa.String)
                        )
                    elif c.name == "upstream_id":
                        exprs.append(sa.null())
                    else:
                        exprs.append(c)
                conn.execute(
                    sa.insert(table).from_select([c.name for c in cols], sa.select(*exprs).where(keep))
                )

            rid = RECIPES.c.id <= count
            moved(RECIPES, rid)
            moved(REVISIONS, REVISIONS.c.recipe_id <= count)
            moved(MEASUREMENTS, MEASUREMENTS.c.recipe_id <= count)
            moved(TAGS, TAGS.c.recipe_id <= count)
            moved(DOCUMENTS, DOCUMENTS.c.recipe_id <= count)
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql(
                    f"INSERT INTO recipe_fts (rowid, body) SELECT rowid + {off['recipes']}, body"
                    f" FROM recipe_fts WHERE rowid <= {count}"
                )
        if conn.dialect.name == "postgresql":
            for t in ("recipes", "revisions", "measurements"):
                conn.exec_driver_sql(
                    f"SELECT setval(pg_get_serial_sequence('{t}', 'id'), (SELECT max(id) FROM {t}))"
                )
    with engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
        total = conn.execute(sa.select(sa.func.count()).select_from(RECIPES)).scalar_one()
    engine.dispose()
    assert total == n, (total, n)
    return round(time.monotonic() - t0, 1)


def writers(url: str, accounts: int = 50) -> dict[str, Any]:
    """Tokens of ``accounts`` voters and of the catalogue's owner (who revises)."""
    import sqlalchemy as sa

    from lair.registry.db.engine import make_engine
    from lair.registry.db.tables import USERS
    from lair.registry.service.accounts import create_token, create_user

    engine = make_engine(url)
    with engine.begin() as conn:
        voters = [create_token(conn, create_user(conn, f"voter-{k}"), "bench") for k in range(accounts)]
        owner = conn.execute(sa.select(USERS.c.id).where(USERS.c.name == "bench")).scalar_one()
        revise = create_token(conn, owner, "bench")
    engine.dispose()
    return {"voters": voters, "owner": revise}


class Writer(threading.Thread):
    """``rate`` writes a second through the real API (votes, unvotes, every tenth a revision) until
    stopped; the latency of each."""

    def __init__(self, base: str, tokens: dict[str, Any], n: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.base, self.tokens, self.n, self.rate = base, tokens, n, rate
        self.stop = threading.Event()
        self.lat_ms: dict[str, list[float]] = {"vote": [], "revision": []}
        self.errors = 0
        self.rng = random.Random(11)

    def _one(self, k: int) -> None:
        i = self.rng.randrange(self.n)
        what = "revision" if k % 10 == 9 else "vote"
        if what == "revision":
            body = json.dumps({"toml": synthetic_recipe(i, random.Random(i)), "notes": f"bench {k}"}).encode()
            req = urllib.request.Request(
                f"{self.base}/api/v1/recipes/bench-{i}/revisions",
                data=body,
                method="POST",
                headers={
                    "authorization": f"Bearer {self.tokens['owner']}",
                    "content-type": "application/json",
                },
            )
        else:
            token = self.rng.choice(self.tokens["voters"])
            method = self.rng.choice(["PUT", "DELETE"])
            req = urllib.request.Request(
                f"{self.base}/api/v1/recipes/bench-{i}/vote",
                method=method,
                headers={"authorization": f"Bearer {token}"},
            )
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                r.read()
        except (urllib.error.URLError, OSError):
            self.errors += 1
        self.lat_ms[what].append((time.perf_counter() - t) * 1000)

    def run(self) -> None:
        k, start = 0, time.monotonic()
        while not self.stop.is_set():
            self._one(k)
            k += 1
            self.stop.wait(max(0.0, start + k / self.rate - time.monotonic()))

    def figures(self) -> dict[str, Any]:
        """p50/p99 of every write, and of votes and revisions apart (a revision runs the recipe
        checks and the canonical TOML export besides the render)."""
        out: dict[str, Any] = {"write_errors": self.errors}
        for label, lat in (
            ("write", self.lat_ms["vote"] + self.lat_ms["revision"]),
            ("vote", self.lat_ms["vote"]),
            ("revision", self.lat_ms["revision"]),
        ):
            lat = sorted(lat)
            if lat:
                out[f"{label}s"] = len(lat)
                out[f"{label}_p50_ms"] = round(statistics.median(lat), 1)
                out[f"{label}_p99_ms"] = round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1)
        return out


def paths_for(n: int) -> dict[str, list[str]]:
    slugs = [f"bench-{i}" for i in range(n)]
    searches = []
    for gpu, _ in GPUS:
        for ctx in (32768, 65536):
            for tag in TAGS[:5]:
                searches.append(
                    f"/api/v1/recipes?gpu={gpu.replace(' ', '+')}&min_context={ctx}&tag={tag}&limit=20"
                )
    words = ["model", "vllm", "sglang", "h200", "rtx", "synthetic", "chat", "fp8", "code", "context"]
    text = [f"/api/v1/recipes?q={w}+{m}&limit=20" for w in words for m in ("1", "42", "377", "served")]
    text += [f"/api/v1/recipes?q=model+{m}&limit=20" for m in range(0, 500, 5)]  # one model's recipes
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
        "text_search": text,
        "verified_sort": verified,
    }


def distinct_paths(n: int, count: int = 100_000) -> list[str]:
    """``count`` distinct URLs: every recipe's JSON, page and revision URLs, then list and search
    shapes (limits, filters, sorts)."""
    out = [f"/api/v1/recipes/bench-{i}.json" for i in range(n)] + [f"/recipes/bench-{i}" for i in range(n)]
    out += [f"/recipes/bench-{i}/revisions/1" for i in range(n)]
    shapes = [f"gpu={g.replace(' ', '+')}&min_context={c}" for g, _ in GPUS for c in CONTEXTS]
    shapes += [f"engine={e}&tag={t}" for e in ENGINES for t in TAGS] + [f"q=model+{m}" for m in range(200)]
    for sort in ("votes", "updated", "decode"):
        for shape in shapes:
            for limit in range(1, 101):
                out.append(f"/api/v1/recipes?{shape}&sort={sort}&limit={limit}")
    return out[:count]


def warm(base: str, paths: list[str]) -> int:
    hits = 0
    for p in paths:
        with urllib.request.urlopen(base + p, timeout=30) as r:
            body = r.read()
            if p.startswith("/api/v1/recipes?"):
                hits += json.loads(body)["count"]
    return hits


def run_wrk(
    base: str, paths: list[str], seconds: int, conns: int, threads: int, tmp: Path, order: str = "random"
) -> dict[str, Any]:
    listing = tmp / "paths.txt"
    listing.write_text("\n".join(paths) + "\n")
    argv = [
        "wrk",
        f"-t{min(threads, conns)}",
        f"-c{conns}",
        f"-d{seconds}s",
        "--timeout",
        "5s",
        "-s",
        str(LUA),
        base,
    ]
    env = os.environ | {"WRK_PATHS": str(listing), "WRK_ORDER": order}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pids_on(port: int) -> list[int]:
    """The processes listening on ``port`` (the worker that answers)."""
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True).stdout
    return sorted({int(x.split(",")[0]) for x in out.split("pid=")[1:]})


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


@contextmanager
def process(
    argv: list[str], port: int, log: Path, env: dict[str, str] | None = None, probe: str = "/"
) -> Iterator[str]:
    from lair.testing.registry import wait_http

    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=os.environ | (env or {}),
            start_new_session=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_http(base + probe, timeout=60)
            yield base
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _line(kind: str, name: str, r: dict[str, Any]) -> None:
    w = f"  writes p99 {r['write_p99_ms']:.1f} ms" if "write_p99_ms" in r else ""
    w += (
        f" (votes {r['vote_p99_ms']:.1f}, revisions {r.get('revision_p99_ms', 0):.1f})"
        if "vote_p99_ms" in r
        else ""
    )
    print(
        f"[{kind}] {name:24} {r['req_s']:>9,.0f} req/s  p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms"
        f"  errors {r['errors']}{w}",
        file=sys.stderr,
    )


WRITE_CASE_S = 20
"""A case with writes lasts at least this long: at 10 writes/s, 200 writes (20 revisions), so that the
writes' p99 is not the largest of 80 (8 s cases gave one revision's 54 ms as the p99)."""


def _loaded(
    base: str,
    paths: list[str],
    rate: float,
    n: int,
    tokens: dict[str, Any],
    args: Any,
    tmp: Path,
    conns: int | None = None,
) -> dict[str, Any]:
    writer = Writer(base, tokens, n, rate) if rate else None
    seconds = max(args.seconds, WRITE_CASE_S) if rate else args.seconds
    if writer:
        writer.start()
    try:
        r = run_wrk(base, paths, seconds, conns or args.connections, args.threads, tmp)
    finally:
        if writer:
            writer.stop.set()
            writer.join()
    return r | (writer.figures() if writer else {})


def bench_lair(kind: str, url: str, n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from lair.testing.registry import serve_process

    res: dict[str, Any] = {}
    tokens = writers(url)
    env = {"LAIR_REGISTRY_WRITE_LIMIT": "100000/minute"}
    if args.only == "growth":  # every search runs its query: the figures are the search's, not the cache's
        env["LAIR_REGISTRY_CACHE_MB"] = "0"
    os.environ.update(env)
    paths = paths_for(n)
    plan = [("recipe_json", r) for r in (0, 1, 10, 50)] + [("recipe_page", r) for r in (0, 10)]
    plan += [("search", 0), ("search", 10), ("text_search", 0), ("verified_sort", 0)]
    if args.only == "growth":
        plan = [("recipe_json", 10), ("search", 10), ("text_search", 0)]
    cases = [c for c in args.cases.split(",") if c]
    if cases:
        plan = [(c.split("@")[0], int(c.split("@")[1])) for c in cases if c.split("@")[0] in paths]
    with serve_process(url, workers=1, seed=False, log=tmp / f"serve-{kind}-{n}.log") as base:
        port = int(base.rsplit(":", 1)[1])
        for name, rate in plan:
            if name not in ("recipe_json", "recipe_page"):
                warm(base, paths[name])  # the lists' memory cache (the recipes' own URLs: never warmed)
            r = res[f"{name}@{rate}"] = _loaded(base, paths[name], rate, n, tokens, args, tmp)
            _line(kind, f"{name} @{rate} w/s", r)
        if not cases or "text_search_1conn@0" in cases:
            r = res["text_search_1conn@0"] = _loaded(
                base, paths["text_search"], 0, n, tokens, args, tmp, conns=1
            )
            _line(kind, "text_search 1 conn", r)
        if args.only != "growth" and (not cases or "distinct@0" in cases):
            many = distinct_paths(n)
            seconds = args.seconds
            args.seconds = max(seconds, 30)
            r = res["distinct@0"] = run_wrk(
                base, many, args.seconds, args.connections, args.threads, tmp, "turn"
            )
            args.seconds = seconds
            res["rss_mb"] = max(rss_mb(p) for p in _pids_on(port))
            res["distinct_urls"] = len(many)
            _line(kind, f"{len(many):,} distinct URLs", r)
            print(f"[{kind}] RSS after them: {res['rss_mb']} MB", file=sys.stderr)
    for k in env:
        os.environ.pop(k, None)
    return res


def bench_anchors(url: str, n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """The inline route and datasette on the same SQLite file, recipe JSON over every slug."""
    from lair.registry.db.engine import sqlite_path

    path, res = sqlite_path(url), {}
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "granian",
        "--interface",
        "asgi",
        "--factory",
        "--workers",
        "1",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-ws",
        "benchmarks.registry_anchor:app",
    ]
    env = {"LAIR_ANCHOR_DB": path, "PYTHONPATH": str(ROOT)}
    with process(argv, port, tmp / "anchor.log", env, "/api/v1/recipes/bench-0.json") as base:
        r = res["inline_route:recipe_json"] = run_wrk(
            base, paths_for(n)["recipe_json"], args.seconds, args.connections, args.threads, tmp
        )
        _line("anchor", "inline route JSON", r)
    if not DATASETTE.exists():
        res["datasette"] = f"not run: no {DATASETTE} (python3 -m venv ...; pip install datasette)"
        return res
    port = free_port()
    argv = [str(DATASETTE), "serve", "--immutable", path, "--host", "127.0.0.1", "--port", str(port)]
    name = Path(path).stem  # datasette names a database after its file
    ids = [f"/{name}/recipes/{i}.json" for i in range(1, n + 1)]
    with process(argv, port, tmp / "datasette.log", probe=ids[0]) as base:
        r = res["datasette:recipe_json"] = run_wrk(
            base, ids, args.seconds, args.connections, args.threads, tmp
        )
        _line("anchor", "datasette row JSON", r)
    return res


def bench_db(kind: str, n: int, args: argparse.Namespace, stack: ExitStack, tmp: Path) -> dict[str, Any]:
    from lair.testing.registry import pg_database

    url = (
        f"sqlite:///{tmp / f'bench-{n}.sqlite3'}" if kind == "sqlite" else stack.enter_context(pg_database())
    )
    base = min(n, args.grow_from) if args.only == "growth" else n
    seeded = seeded_from_cache(url, base, args.seed_cache) if kind == "sqlite" else seed(url, base)
    if base < n:
        seeded["grow_s"] = grow(url, base, n)
    print(f"[{kind}] {n} recipes, {n * len(CONTEXTS)} measurements: {seeded}", file=sys.stderr)
    res: dict[str, Any] = {"recipes": n, **seeded, **bench_lair(kind, url, n, args, tmp)}
    if args.only == "growth":
        res["uncached"] = True  # LAIR_REGISTRY_CACHE_MB=0: the list targets are for the cached site
    if kind == "sqlite" and args.only != "growth":
        res |= bench_anchors(url, n, args, tmp)
    return res


def _ok(r: dict[str, Any], want_rps: int, want_p99: int | None) -> str:
    good = r["req_s"] >= want_rps and (want_p99 is None or r["p99_ms"] <= want_p99)
    return "met" if good else "NOT met"


def table(all_results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| DB | recipes | case | req/s | p50 ms | p99 ms | write p99 ms (votes / revisions) | target | |",
        "|" + "---|" * 9,
    ]
    for label, res in all_results.items():
        kind = label.split("@")[0]
        for key, r in res.items():
            if not isinstance(r, dict):
                continue
            want = None if res.get("uncached") else TARGETS.get(kind, {}).get(key)
            target = f">= {want[0]:,}" + (f", p99 <= {want[1]} ms" if want[1] else "") if want else ""
            verdict = _ok(r, *want) if want else ""
            if key == "text_search_1conn@0" and res["recipes"] >= 100_000:
                target = f"median <= {TEXT_MEDIAN_MS} ms"
                verdict = "met" if r["p50_ms"] <= TEXT_MEDIAN_MS else "NOT met"
            wp99 = r.get("write_p99_ms")
            if wp99 is not None:
                verdict += (
                    "; " if verdict else ""
                ) + f"writes {'met' if wp99 <= WRITE_P99_MS else 'NOT met'} (votes "
                verdict += f"{'met' if r.get('vote_p99_ms', 1e9) <= WRITE_P99_MS else 'NOT met'})"
                wp99 = f"{wp99} ({r.get('vote_p99_ms')} / {r.get('revision_p99_ms')})"
            lines.append(
                f"| {kind} | {res['recipes']:,} | {key} | {r['req_s']:,.0f} | {r['p50_ms']:.2f} | "
                f"{r['p99_ms']:.2f} | {'' if wp99 is None else wp99} | {target} | {verdict} |"
            )
        if "rss_mb" in res:
            v = "met" if res["rss_mb"] <= RSS_MB else "NOT met"
            lines.append(
                f"| {kind} | {res['recipes']:,} | RSS after {res['distinct_urls']:,} distinct URLs | "
                f"{res['rss_mb']} MB | | | | <= {RSS_MB} MB | {v} |"
            )
        for k in ("seed_and_render_s", "verify_and_render_s", "grow_s"):
            if k not in res:
                continue
            lines.append(f"| {kind} | {res['recipes']:,} | {k} | {res[k]} s | | | | | |")
        anchor = res.get("inline_route:recipe_json")
        mine = res.get("recipe_json@10")
        if anchor and mine:
            lines.append(
                f"| {kind} | {res['recipes']:,} | lair JSON @10 w/s / inline route @0 | "
                f"{mine['req_s'] / anchor['req_s']:.2f}x | | | | >= 1x | "
                f"{'met' if mine['req_s'] >= anchor['req_s'] else 'NOT met'} |"
            )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--recipes", default="10000", help="sizes, comma-separated (1000,10000,100000)")
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument("--only", choices=["all", "growth"], default="all", help="growth: the few cases per size")
    ap.add_argument(
        "--cases",
        default="",
        help="only these cases of lair, comma-separated (recipe_json@10,search@10,text_search_1conn@0,"
        "distinct@0); the anchors run all the same",
    )
    ap.add_argument("--out", type=Path, default=OUT / "registry_load.json")
    ap.add_argument("--grow-from", type=int, default=GROW_FROM, help="growth: seed this many, copy the rest")
    ap.add_argument(
        "--seed-cache",
        type=Path,
        default=None,
        help="keep each seeded SQLite file here and reuse it while src/ and this file are unchanged",
    )
    args = ap.parse_args()
    if not shutil.which("wrk"):
        print("wrk not found: apt-get install wrk (or bash scripts/registry-setup.sh)", file=sys.stderr)
        return 2
    kinds = ["sqlite", "postgresql"] if args.db == "both" else [args.db]
    results: dict[str, dict[str, Any]] = {}
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="lair-regload-") as tmp:
        for n in [int(x) for x in args.recipes.split(",")]:
            for kind in kinds:
                results[f"{kind}@{n}"] = bench_db(kind, n, args, stack, Path(tmp))
    text = table(results)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "args": vars(args) | {"out": str(args.out), "seed_cache": str(args.seed_cache or "")},
        "targets": {k: {c: list(v) for c, v in t.items()} for k, t in TARGETS.items()},
    }
    args.out.write_text(json.dumps(meta | {"results": results}, indent=2))
    args.out.with_suffix(".md").write_text(text + "\n")
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
