"""Writes first: while a write transaction runs on a worker thread, the event loop steps aside.

A worker serves its reads on the event loop and runs each write on a thread (so that a write never
holds up the reads). Both need the GIL, and CPython hands it over every switch interval: under 32
connections of cached reads a vote that takes 3 ms alone took 8.5 ms on its thread (p50), a
revision 45 ms instead of 13, and their p99 at the client was 27 and 80 ms. Here the loop, before it
starts on a read (the front middleware, :class:`~lair.registry.web.middleware.CacheMiddleware`),
waits while a write is running, so the write has the GIL and a core to itself: for at most the
grace after a write begins, and never more than the share of any second in all, so that no stream
of writes (a flood from many accounts, a slow upload) can stop the reads. Reads are many and short;
a write is rare, and its client waits for all of it.

The budgets (:data:`BUDGETS`) are the database's: a SQLite write is Python and SQLite in this
process (a vote 1-3 ms, a revision 13 ms alone); a PostgreSQL write waits on some 30 round trips,
each a wake-up of a backend that needs a core of its own. The chart drawer's re-renders
(:mod:`lair.registry.service.drawer`) go first too: on SQLite a route's write that comes while one
holds the write lock waits for it. Measured with ``benchmarks/registry_load.py`` (10k recipes, 32
connections of recipe JSON, 10 writes/s, every tenth a revision, 20 s; write p99, then the reads'
p99; "+ drawer": its re-renders in the priority too, as now):

================= =========================== ============================
grace             SQLite                      PostgreSQL
================= =========================== ============================
none              66.8 ms (reads 7.7 ms)      122.5 ms (reads 13.2 ms)
10 ms             33.2 ms (reads 8.0 ms)      90.1 ms (reads 16.4 ms)
10 ms + drawer    42.4 ms (reads 9.3 ms)
20 ms + drawer    29.7 ms (reads 9.9 ms)
40 ms                                         40.5 ms (reads 25.9 ms)
80 ms                                         34.0 ms (reads 25.5 ms)
================= =========================== ============================

The reads' throughput was within the runs' spread in every row (SQLite 10,800-12,000 req/s,
PostgreSQL 6,600-6,800). With 20 ms the page and the filtered search at 10 writes/s gave 28.9 and
34.9 ms (10 ms: 40.7 and 47.2), the reads' p99 9.6 and 10.3 ms.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["BUDGETS", "WritePriority"]

BUDGETS = {"sqlite": (0.020, 0.200), "postgresql": (0.080, 0.300)}
"""Per database: how long after a write begins the loop waits for it, and the most it waits for
writes in any one second (seconds)."""


class WritePriority:
    """One per app. :meth:`writing` around a write transaction (any thread); :meth:`step_aside` on the
    event loop before a read. ``clock``: the seconds the budgets are counted in (monotonic)."""

    def __init__(self, grace_s: float, share_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace_s, self.share_s, self._clock = grace_s, share_s, clock
        self._idle = threading.Event()
        self._idle.set()
        self._lock = threading.Lock()
        self._writes = 0
        self._until = 0.0
        self._window = 0.0  # the loop's own: only step_aside touches these two
        self._spent = 0.0

    @classmethod
    def of(cls, dialect: str) -> WritePriority:
        return cls(*BUDGETS[dialect])

    @property
    def writes(self) -> int:
        """The write transactions running now."""
        return self._writes

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._lock:
            self._writes += 1
            self._until = max(self._until, self._clock() + self.grace_s)
            self._idle.clear()
        try:
            yield
        finally:
            with self._lock:
                self._writes -= 1
                if not self._writes:
                    self._idle.set()

    def step_aside(self) -> float:
        """Wait while a write runs, within the budgets; the seconds waited."""
        if self._idle.is_set():
            return 0.0
        now = self._clock()
        if now - self._window >= 1.0:
            self._window, self._spent = now, 0.0
        wait = min(self._until - now, self.share_s - self._spent)
        if wait <= 0:
            return 0.0
        self._idle.wait(wait)
        waited = self._clock() - now
        self._spent += waited
        return waited
