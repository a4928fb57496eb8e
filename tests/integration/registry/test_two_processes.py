"""Two ``lair serve`` processes over one PostgreSQL: what is written is served by both at once, even
with their response caches warm (the version counter is read per request, shared by a burst)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lair.registry.db.engine import make_engine
from lair.registry.serve import prepare
from lair.registry.service.publish import add_revision, publish
from lair.testing.registry import pg_database, serve_process

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
LLAMA = ROOT / "tests" / "data" / "registry" / "llama31-8b.toml"
SLUG = "llama31-8b-rtx4090-sglang"


def _get(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return dict(json.loads(r.read()))


@pytest.fixture(scope="module")
def two_servers(artifacts: Path) -> Iterator[tuple[str, str, str]]:
    with pg_database() as url:
        prepare(url)
        engine = make_engine(url)
        with engine.begin() as conn:
            publish(conn, LLAMA.read_text(), owner="tester")
        engine.dispose()
        with (
            serve_process(url, seed=False, log=artifacts / "serve-a.log") as a,
            serve_process(url, seed=False, workers=2, log=artifacts / "serve-b.log") as b,
        ):
            yield url, a, b


def test_a_write_is_read_by_both_processes_at_once(two_servers: tuple[str, str, str]) -> None:
    url, a, b = two_servers
    api = f"/api/v1/recipes/{SLUG}.json"
    assert _get(a + api)["revision"] == _get(b + api)["revision"] == 1
    engine = make_engine(url)
    text = LLAMA.read_text()
    for n in range(2, 7):
        for _ in range(3):  # caches warm in every worker
            _get(a + api), _get(b + api)
        with engine.begin() as conn:
            add_revision(
                conn,
                SLUG,
                text.replace("max_context = 32768", f"max_context = {1000 * n}"),
                author="t",
                notes=f"{n}",
            )
        # read right after the commit, from both processes, many requests at once: none may be stale
        with ThreadPoolExecutor(16) as pool:
            docs = list(pool.map(_get, [a + api, b + api] * 16))
        assert {d["revision"] for d in docs} == {n}
        assert {d["recipe"]["meta"]["max_context"] for d in docs} == {1000 * n}  # type: ignore[index]
        assert _get(b + f"/api/v1/recipes?min_context={1000 * n}&gpu=RTX+4090")["count"] == 1
    engine.dispose()
