"""``lair registry export-static DIR``: the whole JSON API and the pages as files, same URLs.

Every file is fetched from the app itself in process (so it is byte for byte what ``lair serve``
answers). A URL without an extension becomes ``<url>/index.html`` (pages) or ``<url>/index.json``
(``/api/v1/recipes``), which is how static hosts and CDNs serve a folder's URL.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import sqlalchemy as sa

from lair.registry.db.engine import connect_url, default_url, make_engine

__all__ = ["export_static", "static_urls"]


def static_urls(db: str | None) -> list[str]:
    from lair.registry.db.tables import RECIPES, REVISIONS, visible

    engine = make_engine(db)
    urls = [
        "/",
        "/api/v1/recipes",
        "/recipes.json",
        "/api/v1/openapi.json",
        "/api/v1/gpus",
        "/api/v1/efficiencies",
        "/llms.txt",
        "/static/style.css",
    ]
    with engine.connect() as conn:
        stmt = sa.select(RECIPES.c.slug, REVISIONS.c.number).join(
            REVISIONS, REVISIONS.c.recipe_id == RECIPES.c.id
        )
        rows = list(conn.execute(stmt.where(visible())))
    engine.dispose()
    for slug in sorted({s for s, _ in rows}):
        urls += [
            f"/recipes/{slug}",
            f"/recipes/{slug}.json",
            f"/recipes/{slug}/placeholders",
            f"/recipes/{slug}/fit",
            f"/recipes/{slug}/cost",  # at the default price: a static host ignores ?price_kwh=
        ]
        urls += [f"/api/v1/recipes/{slug}.{ext}" for ext in ("json", "toml", "yaml")]
    for slug, n in sorted(rows):
        urls += [f"/recipes/{slug}/revisions/{n}", f"/recipes/{slug}/revisions/{n}.json"]
        urls += [f"/api/v1/recipes/{slug}/revisions/{n}.{ext}" for ext in ("json", "toml", "yaml")]
    return urls


def _file_for(root: Path, url: str) -> Path:
    rel = url.strip("/")
    if not rel:
        return root / "index.html"
    last = rel.rsplit("/", 1)[-1]
    if "." in last:
        return root / rel
    return root / rel / ("index.json" if rel.startswith("api/") else "index.html")


async def _fetch_all(app: object, base: str, urls: list[str], root: Path) -> list[Path]:
    import httpx

    out = []
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url=base or "http://localhost") as client:
        for url in urls:
            resp = await client.get(url)
            if resp.status_code != 200:
                raise RuntimeError(f"{url}: status {resp.status_code}")
            path = _file_for(root, url)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(resp.content)
            out.append(path)
    return out


def export_static(out_dir: str | Path, db: str | None = None, *, base_url: str = "") -> list[Path]:
    from lair.registry.web.app import create_app

    url = connect_url(db or default_url())
    app = create_app(url, public_url=base_url.rstrip("/") or None, cache_bytes=0)
    return asyncio.run(_fetch_all(app, base_url.rstrip("/"), static_urls(url), Path(out_dir)))
