"""Speed charts drawn off the write: the drawer of a serving process.

A write that changes a recipe's rows changes its charts, and drawing one with matplotlib takes
0.2-0.5 s of Python: inside the write's transaction that held the write lock (SQLite) or the version
row (PostgreSQL) and made the write's own answer late (a revision's p99 under a read load was 1.3 s).
While a :class:`ChartDrawer` is started for an engine, :func:`~.stored.refresh_documents` renders
with ``chart_store(conn, defer=True)``: a chart not yet in ``chart_svgs`` leaves a placeholder in the
stored page, the recipe is noted in ``chart_pending`` in the same transaction, and the drawer gets it.

The drawer's thread hands each chart to a child process (``python -m lair.registry.service.drawer``,
one JSON line per chart each way), so the drawing runs on a core of its own and never holds the
serving process's GIL; a child that dies is started again, and one that cannot start is replaced by
drawing on the thread. With the SVGs in hand, one short transaction keeps them, clears the recipe's
``chart_pending`` row and renders its documents again (:func:`~.stored.changed`, the vote counter:
lists stay cached), now with the charts inline. A page shows its placeholder for the time of one
drawing after such a write. At start the drawer takes up every recipe left in ``chart_pending`` by a
process that stopped before drawing; a write whose transaction rolled back costs one needless render.
Without a started drawer (the CLI, the tests of the service layer) charts are drawn inline, as before.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import IO, cast

import sqlalchemy as sa
from sqlalchemy import Engine

from lair.registry.service.changes import Note, recording
from lair.registry.service.chart import chart_key, store_svgs
from lair.registry.service.chart_queue import PENDING, register, unregister
from lair.registry.service.stored import changed
from lair.report.charts import Chart, Series, render

__all__ = ["ChartDrawer"]

_CLEAR = sa.delete(PENDING).where(PENDING.c.recipe_id == sa.bindparam("rid"))

log = logging.getLogger(__name__)


def _to_json(chart: Chart) -> str:
    series = [[s.concurrency, [list(p) for p in s.points], s.tier, s.label] for s in chart.series]
    return json.dumps(
        [chart.title, chart.quantity, chart.unit, series, chart.roofline_label, chart.solid_label]
    )


def _from_json(line: str) -> Chart:
    title, quantity, unit, series, roof, solid = json.loads(line)
    lines = [Series(c, [tuple(p) for p in pts], t, label) for c, pts, t, label in series]
    return Chart(title, quantity, unit, lines, roof, solid)


class _Child:
    """The drawing process: a chart's JSON line in, its SVG's JSON string out."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lair.registry.service.drawer"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            close_fds=True,
        )  # fmt: skip

    def draw(self, chart: Chart) -> str:
        stdin, stdout = cast(IO[str], self.proc.stdin), cast(IO[str], self.proc.stdout)
        stdin.write(_to_json(chart) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise OSError("the chart drawer's process ended")
        svg = json.loads(line)
        if svg is None:
            raise ValueError(f"the chart drawer's process could not draw {chart.title!r}")
        return str(svg)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class ChartDrawer:
    """Draws the charts writes of ``engine`` deferred, one recipe at a time, on a thread of its own;
    ``on_commit`` gets the change notes of each of its re-renders (the app's change log), and
    ``writing`` is entered around each of their transactions (the app's write priority: a re-render
    holds SQLite's write lock, and a route's write that comes meanwhile waits for it)."""

    def __init__(
        self,
        engine: Engine,
        on_commit: Callable[[list[Note]], None] | None = None,
        writing: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> None:
        self.engine = engine
        self._on_commit = on_commit
        self._writing = writing
        self._todo: dict[int, list[Chart]] = {}
        self._cond = threading.Condition()
        self._busy = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self._child: _Child | None = None
        self._child_failed = False

    def start(self) -> bool:
        """Defer the charts of this engine's writes in this process (False, and nothing deferred, on a
        database before migration 0014); takes up the recipes other processes left pending."""
        try:
            if not sa.inspect(self.engine).has_table("chart_pending"):
                return False
            with self.engine.connect() as conn:
                left = list(conn.execute(sa.select(PENDING.c.recipe_id)).scalars())
        except sa.exc.DBAPIError:  # the database is down: serve (503s) and draw inline once it is back
            log.warning("the chart drawer did not start: charts are drawn inside the writes", exc_info=True)
            return False
        self._thread = threading.Thread(target=self._run, name="lair-charts", daemon=True)
        self._thread.start()
        register(self.engine, self)
        for rid in left:
            self.submit(rid, [])  # its page is rendered again, and what it lacks drawn then
        return True

    def submit(self, recipe_id: int, charts: list[Chart]) -> None:
        with self._cond:
            self._todo.setdefault(recipe_id, []).extend(charts)
            self._cond.notify_all()

    def warm(self) -> None:
        """Start the drawing process and draw one chart there (its imports and first figure)."""
        self._svg(Chart("warm", "warm", "tok/s", [Series(1, [(1.0, 1.0), (2.0, 2.0)], tier="reported")], ""))

    def idle(self, timeout: float = 30.0) -> bool:
        """Wait until nothing is left to draw; False when ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._todo and not self._busy, timeout)

    def close(self, timeout: float = 10.0) -> None:
        unregister(self.engine)
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._child is not None:
            self._child.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._todo or self._stop)
                if self._stop:
                    return
                rid = next(iter(self._todo))
                charts = self._todo.pop(rid)
                self._busy = True
            try:
                self._one(rid, charts)
            except Exception:  # an outage: the row stays in chart_pending for the next start
                log.warning("drawing the charts of recipe %s failed", rid, exc_info=True)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _one(self, recipe_id: int, charts: list[Chart]) -> None:
        unique = {chart_key(c): c for c in charts}
        svgs = {key: self._svg(c) for key, c in unique.items()}
        with self._writing(), recording() as notes, self.engine.begin() as conn:
            store_svgs(conn, svgs)
            conn.execute(_CLEAR, {"rid": recipe_id})
            changed(conn, [recipe_id], lists=False)  # may defer again: rows changed meanwhile
        if self._on_commit is not None:
            self._on_commit(notes)

    def _svg(self, chart: Chart) -> str:
        if self._child_failed:
            return render(chart)
        for attempt in (1, 2):
            try:
                if self._child is None:
                    self._child = _Child()
                return self._child.draw(chart)
            except OSError:
                log.warning("the chart drawing process failed (attempt %s)", attempt, exc_info=True)
                if self._child is not None:
                    self._child.close()
                self._child = None
        self._child_failed = True  # drawn on this thread from now on
        return render(chart)


def main() -> None:
    """The drawing process: read charts, one JSON line each, answer each with its SVG's JSON string."""
    for line in sys.stdin:
        try:
            svg: str | None = render(_from_json(line))
        except Exception:  # the parent logs it; the process stays up for the next chart
            svg = None
        sys.stdout.write(json.dumps(svg) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
