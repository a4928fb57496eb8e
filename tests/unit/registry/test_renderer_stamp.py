"""Stored documents rendered by another release's templates (SQLite and PostgreSQL): ``lair serve``'s
start (``prepare``) renders every recipe again when the stamp ``registry_version.renderer`` names
another fingerprint of the templates and view code, and stamps its own; when the stamp is its own it
renders nothing. The fingerprint moves with a template and with a view module, not with other files."""

from __future__ import annotations

import shutil
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import Engine

import lair
from lair.registry.serve import prepare
from lair.registry.service.publish import seed_examples
from lair.registry.service.stored import DOCUMENTS, RENDERED_BY, fingerprint, render_documents, renderer

SLUG = "tiny-cpu"
OLD_PAGE = b"<!doctype html><p>a page as the release before rendered it</p>"


def _page(engine: Engine) -> bytes:
    d = DOCUMENTS.c
    with engine.connect() as conn:
        where = sa.and_(d.slug == SLUG, d.kind == "page", d.revision == 0)
        return bytes(conn.execute(sa.select(d.body).where(where)).scalar_one())


def _stamp(engine: Engine, value: str | None = None) -> str | None:
    with engine.begin() as conn:
        if value is not None:
            conn.execute(sa.text("UPDATE registry_version SET renderer = :r"), {"r": value})
        found = conn.execute(sa.text("SELECT renderer FROM registry_version")).scalar_one()
    return None if found is None else str(found)


def _as_before(engine: Engine) -> None:
    """tiny-cpu's stored page as another release's templates left it."""
    d = DOCUMENTS.c
    with engine.begin() as conn:
        where = sa.and_(d.slug == SLUG, d.kind == "page", d.revision == 0)
        conn.execute(sa.update(DOCUMENTS).where(where).values(body=OLD_PAGE))


def test_a_start_renders_what_another_renderer_stored_and_stamps_its_own(db_url: str, engine: Engine) -> None:
    with engine.begin() as conn:
        seed_examples(conn)
    prepare(db_url, seed=False)
    assert _stamp(engine) == renderer()  # a new database: stamped on its first start
    _as_before(engine)
    prepare(db_url, seed=False)  # the stamp is this release's: nothing rendered again
    assert _page(engine) == OLD_PAGE
    _stamp(engine, "0" * 64)  # another release's templates rendered the rows
    prepare(db_url, seed=False)
    with engine.connect() as conn:
        fresh = next(
            r["body"] for r in render_documents(conn, SLUG) if r["kind"] == "page" and not r["revision"]
        )
    assert _page(engine) == fresh != OLD_PAGE and _stamp(engine) == renderer()


def test_the_fingerprint_moves_with_the_templates_and_view_code_only(tmp_path: Path) -> None:
    root = Path(lair.__file__).parent
    for rel in (*RENDERED_BY, "registry/web/static", "registry/service/votes.py"):
        src, dst = root / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copyfile)(src, dst)
    base = fingerprint(tmp_path, "1.0")
    assert base == fingerprint(root, "1.0") and base != fingerprint(tmp_path, "1.1")
    (tmp_path / "registry/web/static/style.css").write_text("/* a stylesheet is linked, not stored */")
    (tmp_path / "registry/service/votes.py").write_text("# not a view module\n")
    assert fingerprint(tmp_path, "1.0") == base
    page = tmp_path / "registry/web/templates/recipe.html"
    page.write_text(page.read_text().replace("</h1>", " </h1>", 1))
    assert fingerprint(tmp_path, "1.0") != base
    page.write_text((root / "registry/web/templates/recipe.html").read_text())
    view = tmp_path / "registry/service/page.py"
    view.write_text(view.read_text() + "\n")
    assert fingerprint(tmp_path, "1.0") != base
