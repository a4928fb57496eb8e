"""Verified means physically checked: speed rows from reports accepted before this rule are re-tiered.

A row from a report stays ``verified`` only when the report's fingerprint names a GPU by a name
nvidia-smi prints for a catalog card, the registry knows the model's facts, and every figure the row
holds stays at or under that GPU's roofline; otherwise it becomes ``reported-by-report`` and its
``note`` says why. The rule is the one uploads follow (``lair.registry.service.verify.row_tier``,
imported when there are rows to re-tier), applied to what the database holds: the revision's TOML,
the report's fingerprint, and the row's context, concurrency, prefill and per-stream decode speeds.
The one difference from an upload: a row is rated at its cell's context, where the upload used the
median prompt tokens (within 10% of it, see ``recompute``), and no row is deleted (a row above its
roofline, which an upload now refuses, is kept as reported-by-report saying so).

What a migration cannot re-check: the raw timings' plausibility (negative or backward times), which
live in the blob store, possibly outside the database. Rows the new upload checks would refuse for
their timings alone stay as they are; an admin retracts them (``POST /api/v1/measurements/{id}/retract``).

The speed facets (``best_verified_decode_tok_s``, ``verified_rows``) are recomputed from the rows
that are still verified, as ``speeds.refresh_speeds`` computes them (hidden users' rows left out).
Downgrade makes reported-by-report speed rows verified again, as they were.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_LIVE = (
    "m.recipe_id = recipes.id AND {counted} AND m.retracted_at IS NULL"
    " AND (m.submitted_by IS NULL OR m.submitted_by NOT IN (SELECT id FROM users WHERE hidden = true))"
)


def _facets(counted: str) -> None:
    """The verified speed facets from the rows ``counted`` (an SQL condition on ``m``)."""
    live = _LIVE.format(counted=counted)
    op.execute(
        "UPDATE recipes SET "
        f"best_verified_decode_tok_s = (SELECT max(m.decode_tok_s) FROM measurements m WHERE {live}), "
        f"verified_rows = (SELECT count(*) FROM measurements m WHERE {live})"
    )


def _stored_rows(conn: sa.Connection) -> list[sa.Row[tuple[object, ...]]]:
    return list(
        conn.execute(
            sa.text(
                "SELECT m.id, m.context, m.concurrency, m.prefill_tok_s, m.decode_tok_s,"
                " m.decode_tok_s_per_stream, v.toml, r.fingerprint FROM measurements m"
                " JOIN reports r ON r.id = m.report_id JOIN revisions v ON v.id = m.revision_id"
                " WHERE m.provenance = 'verified' ORDER BY m.id"
            )
        )
    )


def upgrade() -> None:
    conn = op.get_bind()
    rows = _stored_rows(conn)
    if rows:
        from lair.registry.service.canonical import recipe_from_canonical
        from lair.registry.service.verify import row_tier

        update = sa.text("UPDATE measurements SET provenance = :tier, note = :note WHERE id = :id")
        for r in rows:
            conc = r.concurrency or 1
            stream = r.decode_tok_s_per_stream
            stream = r.decode_tok_s if stream is None and conc == 1 else stream  # one stream: the same
            cell = {"context": r.context, "concurrency": conc, "prompt_tokens": None}
            cell |= {"prefill_tok_s": r.prefill_tok_s, "decode_tok_s_per_stream": stream}
            tier, note = row_tier(recipe_from_canonical(str(r.toml)), json.loads(str(r.fingerprint)), cell)
            if tier != "verified":
                conn.execute(update, {"tier": tier, "note": note, "id": r.id})
    _facets("m.provenance = 'verified'")


def downgrade() -> None:
    op.execute("UPDATE measurements SET provenance = 'verified' WHERE provenance = 'reported-by-report'")
    _facets("m.provenance <> 'reported'")  # as 0005 counted them
