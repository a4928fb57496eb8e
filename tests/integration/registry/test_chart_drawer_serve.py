"""The chart drawer of a real ``lair serve`` (granian, SQLite): a publish through the API answers
before its charts are drawn (the page shows placeholders, then the charts); a server killed (SIGKILL,
its workers and their drawing processes with it) right after such a write leaves the recipe in
``chart_pending``, and the next server draws the chart without any write. (The test recipe's rows have no
prefill speed: its page has one chart, decode.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import sqlalchemy as sa

from lair.registry.db.engine import make_engine
from lair.registry.serve import prepare
from lair.testing.registry import serve_process

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
LLAMA = ROOT / "tests" / "data" / "registry" / "llama31-8b.toml"
SLUG = "llama31-8b-rtx4090-sglang"


def _token(db: str) -> str:
    argv = [sys.executable, "-m", "lair", "registry", "user", "add", "author", "--db", db, "--json"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return str(json.loads(res.stdout)["token"])


def _post(url: str, token: str, toml: str) -> int:
    req = urllib.request.Request(url, json.dumps({"toml": toml}).encode(), method="POST")
    req.add_header("authorization", f"Bearer {token}")
    req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return int(resp.status)


def _page(base: str) -> str:
    with urllib.request.urlopen(f"{base}/recipes/{SLUG}", timeout=30) as resp:
        return str(resp.read().decode())


def _charts_shown(base: str, timeout: float = 90.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        page = _page(base)
        if page.count('class="chart"') == 1 or time.monotonic() > deadline:
            return page
        time.sleep(0.2)


def _pending(db: str) -> list[int]:
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text("SELECT recipe_id FROM chart_pending")).scalars())
    finally:
        engine.dispose()


def test_the_charts_of_a_write_are_drawn_after_it_even_across_a_killed_server(
    tmp_path: Path, artifacts: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'registry.sqlite3'}"
    prepare(db)
    token = _token(db)
    with serve_process(db, seed=False, log=artifacts / "serve-drawer-a.log") as base:
        assert _post(f"{base}/api/v1/recipes", token, LLAMA.read_text()) == 201
        os.killpg(base.pid, signal.SIGKILL)  # before its drawer drew (two matplotlib charts: >0.1 s)
    assert len(_pending(db)) == 1
    with serve_process(db, seed=False, log=artifacts / "serve-drawer-b.log") as base:
        page = _charts_shown(base)  # no write: the new server's drawer took the recipe up
        assert page.count('class="chart"') == 1 and "chart-pending" not in page
        assert _pending(db) == []
        # a revision that changes a row: its answer first, then the new charts from this drawer
        revised = LLAMA.read_text().replace("decode_tok_s = 30\n", "decode_tok_s = 31\n", 1)
        assert _post(f"{base}/api/v1/recipes/{SLUG}/revisions", token, revised) == 201
        final = _charts_shown(base)
        assert final.count('class="chart"') == 1 and "chart-pending" not in final and _pending(db) == []
        assert _charts(final) != _charts(page)  # the decode chart moved with the row


def _charts(page: str) -> list[str]:
    """The speed charts' SVG elements of a page, in order."""
    found = [part.split("</svg>")[0] for part in page.split("<svg")[1:]]
    return [f for f in found if 'class="chart"' in f.split(">")[0]]
