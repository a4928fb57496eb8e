"""The JSON document of a recipe: the page's twin and ``/api/v1/recipes/<slug>.json``.

``recipe`` is exactly what ``lair export --format json`` prints for the revision's canonical model;
beside it: slug, revision, sha256, votes, speed and quality rows with provenance, driver floor,
history, links. Each speed row carries its ``certificate`` (:mod:`.certificates`), its ``energy``
and its ``cost`` at ``price_kwh`` (:mod:`.energy`: the default price in the stored document).
"""

from __future__ import annotations

from typing import Any

from lair.registry.service.canonical import revision_model
from lair.registry.service.driver_floor import driver_floor
from lair.registry.service.energy import DEFAULT_PRICE_KWH, with_costs
from lair.registry.service.read import RecipeRecord, RevisionInfo
from lair.registry.service.timefmt import iso

__all__ = ["api_url", "cost_document", "recipe_document", "revision_document"]


def api_url(base: str, slug: str, ext: str = "json") -> str:
    return f"{base}/api/v1/recipes/{slug}.{ext}"


def _revision(r: RevisionInfo) -> dict[str, Any]:
    return {
        "number": r.number,
        "sha256": r.sha256,
        "notes": r.notes,
        "author": r.author,
        "created_at": iso(r.created_at),
    }


def recipe_document(rec: RecipeRecord, base: str, price_kwh: float = DEFAULT_PRICE_KWH) -> dict[str, Any]:
    slug = rec.slug
    return {
        "ok": True,
        "slug": slug,
        "title": rec.recipe.meta.title or rec.recipe.display_name,
        "revision": rec.revision.number,
        "sha256": rec.revision.sha256,
        "owner": rec.owner,
        "upstream": rec.upstream,
        "upstream_revision": rec.upstream_revision,
        "votes": rec.votes,
        "created_at": iso(rec.created_at),
        "updated_at": iso(rec.updated_at),
        "recipe": revision_model(rec.revision.sha256, rec.revision.toml)[1],
        "measurements": with_costs(rec.measurements, price_kwh),
        "price_kwh": price_kwh,
        "quality": rec.quality,
        "load": rec.load,
        "source": rec.source,
        "driver_floor": driver_floor(rec.recipe).as_dict(),
        "revisions": [_revision(r) for r in rec.history],
        "links": {
            "page": f"{base}/recipes/{slug}",
            "json": api_url(base, slug),
            "toml": api_url(base, slug, "toml"),
            "yaml": api_url(base, slug, "yaml"),
            "revision": f"{base}/api/v1/recipes/{slug}/revisions/{rec.revision.number}.json",
            "cost": f"{base}/recipes/{slug}/cost.json?price_kwh={price_kwh:g}",
        },
    }


def revision_document(rec: RecipeRecord, base: str) -> dict[str, Any]:
    """One revision (immutable): its model, hash, notes and author."""
    doc = recipe_document(rec, base)
    doc["revision_notes"] = rec.revision.notes
    doc["author"] = rec.revision.author
    doc["revision_created_at"] = iso(rec.revision.created_at)
    return doc


_COST_ROW = ("id", "row_id", "revision", "context", "concurrency", "decode_tok_s", "tier", "provenance",
             "retracted", "energy", "certificate_missing")  # fmt: skip


def cost_document(rec: RecipeRecord, base: str, price_kwh: float) -> dict[str, Any]:
    """The twin of ``/recipes/<slug>/cost``: each speed row's energy and $/Mtok (energy) at
    ``price_kwh``, with a link to the row on the recipe page."""
    page = f"{base}/recipes/{rec.slug}"
    rows = [
        {k: r.get(k) for k in _COST_ROW} | {"cost": r["cost"], "link": f"{page}#row-{r['id']}"}
        for r in with_costs(rec.measurements, price_kwh)
    ]
    return {
        "ok": True,
        "slug": rec.slug,
        "revision": rec.revision.number,
        "price_kwh": price_kwh,
        "rows": rows,
        "links": {"page": f"{page}/cost?price_kwh={price_kwh:g}", "recipe": api_url(base, rec.slug)},
    }
