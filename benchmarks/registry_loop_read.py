"""Stored-document read (``python benchmarks/registry_loop_read.py FILE``, a registry SQLite file
seeded by registry_load.py): raw sqlite3 on the event loop vs on anyio's thread pool vs SQLAlchemy (sync
engine) on the thread pool; 32 concurrent tasks, 20,000 reads over 2,000 slugs."""

import asyncio
import random
import sqlite3
import sys
import time

import anyio.to_thread
import sqlalchemy as sa

from lair.registry.db.engine import make_engine
from lair.registry.web.cache import SQLITE_DOCUMENT

PATH = sys.argv[1] if len(sys.argv) > 1 else "registry.sqlite3"
slugs = [f"bench-{i}" for i in range(2000)]
N, C = 20000, 32
conn = sqlite3.connect(PATH, isolation_level=None, check_same_thread=False)
eng = make_engine(f"sqlite:///{PATH}")
stmt = sa.text(SQLITE_DOCUMENT.replace("?", ":a", 1).replace("?", ":b", 1).replace("?", ":c", 1))


def raw(s):
    return conn.execute(SQLITE_DOCUMENT, (s, "json", 0)).fetchone()


def orm(s):
    with eng.connect() as c:
        return c.execute(stmt, {"a": s, "b": "json", "c": 0}).first()


async def run(kind):
    rng = random.Random(1)
    lat = []

    async def worker(k):
        for _ in range(N // C):
            s = rng.choice(slugs)
            t = time.perf_counter()
            if kind == "loop":
                raw(s)
            elif kind == "thread":
                await anyio.to_thread.run_sync(raw, s)
            else:
                await anyio.to_thread.run_sync(orm, s)
            lat.append(time.perf_counter() - t)
            await asyncio.sleep(0)

    t = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(C)))
    el = time.perf_counter() - t
    lat.sort()
    print(
        f"{kind:8} {N / el:9,.0f} reads/s  p50 {lat[len(lat) // 2] * 1e6:8.1f} us  "
        f"p99 {lat[int(len(lat) * 0.99)] * 1e6:8.1f} us"
    )


for k in ("loop", "thread", "orm"):
    asyncio.run(run(k))
