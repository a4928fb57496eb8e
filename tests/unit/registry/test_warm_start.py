"""The write path warmed up before serving (``app._warm_writes``) leaves the database as it found it
(SQLite and PostgreSQL), with recipes or without."""

from __future__ import annotations

import sqlalchemy as sa
from registry_paths import LLAMA, SEED_000
from sqlalchemy import Engine

from lair.registry.service.publish import publish
from lair.registry.web.app import _warm_writes

TABLES = ("recipe_documents", "chart_svgs", "revisions", "measurements")


def _snapshot(engine: Engine) -> dict[str, object]:
    with engine.connect() as conn:
        out: dict[str, object] = {
            t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in TABLES
        }
        out["version"] = tuple(conn.execute(sa.text("SELECT n, lists, votes FROM registry_version")).one())
        out["bodies"] = sorted(conn.execute(sa.text("SELECT etag FROM recipe_documents")).scalars())
    return out


def test_warming_up_stores_nothing(engine: Engine) -> None:
    with engine.begin() as conn:
        publish(conn, LLAMA.read_text(), owner="owner")
        publish(conn, SEED_000.read_text(), owner="owner")
        conn.execute(sa.text("DELETE FROM chart_svgs"))  # the page's charts get drawn, then rolled back
    before = _snapshot(engine)
    assert before["recipe_documents"] == 8
    _warm_writes(engine)
    assert _snapshot(engine) == before


def test_warming_up_an_empty_registry(engine: Engine) -> None:
    before = _snapshot(engine)
    _warm_writes(engine)
    assert _snapshot(engine) == before
