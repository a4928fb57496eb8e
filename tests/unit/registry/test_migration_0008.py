"""Migration 0008 on SQLite and PostgreSQL: rows accepted as verified before the physical rule are
re-tiered. A database at 0007 holds three verified rows of Llama 3.1 8B at 2K, each from its own
report: an H100 at 150 tok/s (68% of the hand-computed 219.3 tok/s ceiling: stays verified), a CPU-only
rig and a GPU nvidia-smi never names (both become reported-by-report with the reason). The recipe's
verified facets follow; a downgrade makes them verified again."""

from __future__ import annotations

import json

import sqlalchemy as sa
from registry_paths import LLAMA

from lair.registry.db.engine import current_revision, make_engine, migrate
from lair.registry.db.tables import MEASUREMENTS, RECIPES, REPORTS, REVISIONS
from lair.registry.db.version import now
from lair.registry.service.publish import publish

SLUG = "llama31-8b-rtx4090-sglang"
RIGS = {
    "h100": {"count": 1, "models": ["NVIDIA H100 80GB HBM3"], "memory": ["81559 MiB"]},
    "cpu": None,
    "fake": {"count": 1, "models": ["NVIDIA FAKE 9000"], "memory": ["99999 MiB"]},
}
SPEEDS = {"h100": 150.0, "cpu": 20.0, "fake": 900.0}


def _old_rows(conn: sa.Connection) -> None:
    recipe_id, revision_id = conn.execute(
        sa.select(RECIPES.c.id, REVISIONS.c.id).join(REVISIONS, REVISIONS.c.recipe_id == RECIPES.c.id)
    ).one()
    ids = {"recipe_id": recipe_id, "revision_id": revision_id}
    for rid, gpus in RIGS.items():
        fp = {"cpu": {"model": "x", "count": 2, "arch": "x86_64"}, "ram_bytes": 1 << 34, "gpus": gpus}
        conn.execute(
            sa.insert(REPORTS).values(
                id=rid, digest=rid * 8, fingerprint=json.dumps(fp), files="[]", created_at=now(),
                rig_fingerprint=f"rig-{rid}", **ids,
            )
        )  # fmt: skip
        conn.execute(
            sa.insert(MEASUREMENTS).values(
                context=2048, concurrency=1, decode_tok_s=SPEEDS[rid], decode_tok_s_per_stream=SPEEDS[rid],
                provenance="verified", note="", report_id=rid, rig_fingerprint=f"rig-{rid}",
                created_at=now(), **ids,
            )
        )  # fmt: skip
    conn.execute(sa.update(RECIPES).values(best_verified_decode_tok_s=900.0, verified_rows=3))


def _state(conn: sa.Connection) -> tuple[dict[str, tuple[str, str]], tuple[float, int]]:
    rows = conn.execute(sa.select(MEASUREMENTS.c.report_id, MEASUREMENTS.c.provenance, MEASUREMENTS.c.note))
    facets = conn.execute(sa.select(RECIPES.c.best_verified_decode_tok_s, RECIPES.c.verified_rows)).one()
    return {r.report_id: (r.provenance, r.note) for r in rows if r.report_id}, (facets[0], facets[1])


def test_0008_re_tiers_verified_rows_by_the_physical_rule_and_back(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate(engine, "0007")
    with engine.begin() as conn:
        publish(conn, LLAMA.read_text(), owner="tester", slug=SLUG)
        _old_rows(conn)
    migrate(engine, "0008")
    assert current_revision(engine) == "0008"
    with engine.connect() as conn:
        rows, facets = _state(conn)
    assert rows == {
        "h100": ("verified", ""),
        "cpu": ("reported-by-report", "no roofline: the fingerprint names no GPU"),
        "fake": (
            "reported-by-report",
            "no roofline: no catalog GPU is called 'NVIDIA FAKE 9000' by nvidia-smi or amd-smi",
        ),
    }
    assert facets == (150.0, 1)  # only the H100 row still counts as verified
    migrate(engine, "0007")
    with engine.connect() as conn:
        rows, facets = _state(conn)
    assert {k: v[0] for k, v in rows.items()} == {"h100": "verified", "cpu": "verified", "fake": "verified"}
    assert facets == (900.0, 3)
    migrate(engine, "base")
    engine.dispose()
