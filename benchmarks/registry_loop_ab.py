"""Lists and searches on the event loop (the previous design) vs on the thread pool (now), one run.

    flock /tmp/lair-heavy.lock python benchmarks/registry_loop_ab.py --recipes 2000

Seeds one PostgreSQL database (``LAIR_TEST_PG``'s server, :func:`registry_load.seed`), starts two
servers on it side by side (granian, 1 worker each, the app of ``lair serve``): **thread_pool**, the
app as it is, and **on_loop**, the same app with the list and search routes (``/``, ``/recipes``,
``/recipes.json``, ``/api/v1/recipes``) wrapped back into ``async`` handlers that run their statements
on the loop, as before. Each case runs on one server, then on the other, in turn:

- ``pool_busy``: the issue's load. A second session takes ``LOCK TABLE recipes`` for ``HOLD_S`` and
  ``SEARCHES`` uncached text searches are sent at once: they hold the 8 pool connections (4 + 4
  overflow) and queue for them, as slow searches would. Meanwhile a stored recipe JSON (read in the
  ASGI front, on async psycopg, no table of the lock) is asked every 50 ms: its p50 and max;
- ``search_uncached@0``: a server started with ``LAIR_REGISTRY_CACHE_MB=0``, so every filtered search
  runs its query in its route (the hop to the thread pool is all that differs);
- ``search@0``, ``search@10``, ``recipe_json@10``: :mod:`registry_load`'s cases of the same names (wrk,
  32 connections, the cache on; writes through the API at 10 /s), which must hold.

SQLAlchemy's async engine (``create_async_engine`` over psycopg) was not measured: the search and
render code is synchronous Core, so it would run on the loop through ``AsyncConnection.run_sync``
(greenlets), waiting for the pool without blocking but compiling statements and building rows
there. Writes ``benchmarks/results/registry_loop_ab.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.registry_load import (  # noqa: E402 - ROOT first, to run as a script
    OUT,
    Writer,
    free_port,
    paths_for,
    process,
    run_wrk,
    seed,
    warm,
    writers,
)

HOLD_S = 3.0
"""How long the lock holds the searches."""
SEARCHES = 12
"""Searches sent at once while it does: more than the pool's 8 connections."""
VARIANTS = {
    "on_loop": "benchmarks.registry_loop_ab:on_loop_factory",
    "thread_pool": "lair.registry.web.app:factory",
}


def _on_loop(fn: Any) -> Any:
    async def endpoint(request: Any) -> Any:
        return fn(request)  # the statements, the pool's checkout and the render on the loop

    return endpoint


def on_loop_factory() -> Any:
    """The app of ``lair serve`` with its list and search routes on the event loop (as before)."""
    from starlette.routing import Route

    from lair.registry.web import routes
    from lair.registry.web.app import factory

    app = factory()
    table = app.app.router.routes
    for i, r in enumerate(table):
        if isinstance(r, Route) and r.endpoint in (routes.home, routes.api_list):
            table[i] = Route(r.path, _on_loop(r.endpoint), methods=list(r.methods or ()))
    return app


@contextmanager
def server(variant: str, url: str, tmp: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "granian", "--interface", "asgi", "--factory", "--workers", "1",
            "--host", "127.0.0.1", "--port", str(port), "--no-ws", "--backlog", "2048",
            VARIANTS[variant]]  # fmt: skip
    env = {"LAIR_REGISTRY_DB": url, "PYTHONPATH": str(ROOT), "LAIR_REGISTRY_WRITE_LIMIT": "100000/minute"} | (
        env or {}
    )
    log = tmp / f"{variant}-{port}.log"
    with process(argv, port, log, env, "/api/v1/health") as base:
        yield base


def _get_ms(url: str) -> float:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as r:
        r.read()
    return (time.perf_counter() - t) * 1000


def pool_busy(base: str, url: str, n: int, round_: int) -> dict[str, Any]:
    """The stored JSON's latency while ``SEARCHES`` searches wait for the locked table."""
    import psycopg

    searches = [
        f"{base}/api/v1/recipes?q=model+{m}&limit=20" for m in range(round_ * 100, round_ * 100 + SEARCHES)
    ]
    json_url = f"{base}/api/v1/recipes/bench-{n // 2}.json"
    _get_ms(json_url)  # its connection open
    before = [_get_ms(json_url) for _ in range(20)]
    lat: list[float] = []
    search_ms: list[float] = []
    locked, released = threading.Event(), threading.Event()

    def hold() -> None:
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as lock:
            lock.execute("LOCK TABLE recipes IN ACCESS EXCLUSIVE MODE")
            locked.set()
            time.sleep(HOLD_S)
            lock.rollback()
        released.set()

    holder = threading.Thread(target=hold)
    holder.start()
    locked.wait()
    sent = [threading.Thread(target=lambda u=u: search_ms.append(_get_ms(u))) for u in searches]
    for t in sent:
        t.start()
    time.sleep(0.3)  # the searches reach the server (and, on the loop, hold it)
    while not released.is_set():  # each read is sent while the lock holds the searches
        lat.append(_get_ms(json_url))
        time.sleep(0.05)
    for t in [holder, *sent]:
        t.join()
    return {
        "json_idle_p50_ms": round(statistics.median(before), 2),
        "json_p50_ms": round(statistics.median(lat), 2),
        "json_max_ms": round(max(lat), 1),
        "json_reads": len(lat),
        "searches_max_ms": round(max(search_ms), 1),
        "hold_s": HOLD_S,
    }


def loaded(
    base: str, paths: list[str], rate: float, n: int, tokens: dict[str, Any], args: Any, tmp: Path
) -> Any:
    writer = Writer(base, tokens, n, rate) if rate else None
    if writer:
        writer.start()
    try:
        r = run_wrk(base, paths, args.write_seconds if rate else args.seconds, 32, 2, tmp)
    finally:
        if writer:
            writer.stop.set()
            writer.join()
    return r | (writer.figures() if writer else {})


def _print(case: str, variant: str, r: dict[str, Any]) -> None:
    print(f"{case:20} {variant:12} {json.dumps(r)}", file=sys.stderr)


def run(args: argparse.Namespace, url: str, tmp: Path) -> dict[str, dict[str, Any]]:
    n = args.recipes
    tokens = writers(url)
    paths = paths_for(n)
    res: dict[str, dict[str, Any]] = {}
    with ExitStack() as stack:
        bases = {v: stack.enter_context(server(v, url, tmp)) for v in VARIANTS}
        for k in range(args.rounds):
            for v, base in bases.items():
                r = res.setdefault(f"pool_busy#{k}", {})[v] = pool_busy(base, url, n, k)
                _print(f"pool_busy#{k}", v, r)
        for name, rate in (("search", 0), ("search", 10), ("recipe_json", 10)):
            for v, base in bases.items():
                if name == "search":
                    warm(base, paths[name])
                r = res.setdefault(f"{name}@{rate}", {})[v] = loaded(
                    base, paths[name], rate, n, tokens, args, tmp
                )
                _print(f"{name}@{rate}", v, r)
    for v in VARIANTS:
        with server(v, url, tmp, {"LAIR_REGISTRY_CACHE_MB": "0"}) as base:
            r = res.setdefault("search_uncached@0", {})[v] = loaded(
                base, paths["search"], 0, n, tokens, args, tmp
            )
            _print("search_uncached@0", v, r)
    return res


def table(res: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| case | design | req/s | p50 ms | p99 ms | write p99 ms | stored JSON p50 / max ms |",
        "|" + "---|" * 7,
    ]
    for case, by in res.items():
        for v, r in by.items():
            if case.startswith("pool_busy"):
                js = f"{r['json_p50_ms']} / {r['json_max_ms']} (idle {r['json_idle_p50_ms']})"
                lines.append(f"| {case} | {v} | | | | | {js} |")
                continue
            w = r.get("write_p99_ms", "")
            lines.append(
                f"| {case} | {v} | {r['req_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {w} | |"
            )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", type=int, default=2000)
    ap.add_argument("--seconds", type=int, default=8, help="a case without writes")
    ap.add_argument("--write-seconds", type=int, default=20, help="a case with writes")
    ap.add_argument("--rounds", type=int, default=2, help="pool_busy rounds per design")
    ap.add_argument("--out", type=Path, default=OUT / "registry_loop_ab.json")
    args = ap.parse_args()
    from lair.testing.registry import pg_database

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    with pg_database() as url, tempfile.TemporaryDirectory(prefix="lair-loopab-") as tmp:
        seeded = seed(url, args.recipes)
        print(f"seeded {args.recipes} recipes: {seeded}", file=sys.stderr)
        res = run(args, url, Path(tmp))
    text = table(res)
    print(text)
    meta = {
        "started": started,
        "head": head.stdout.strip(),
        "cpus": os.cpu_count(),
        "args": vars(args) | {"out": str(args.out)},
    }
    args.out.write_text(json.dumps(meta | {"seeded": seeded, "results": res}, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(text + "\n")
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
