"""``lair registry import-git``: a git repository of recipes loaded into the registry with its
authorship and history.

The repository's history, oldest commit first, as :mod:`lair.interop.git_history` reads it (lair
TOML and sparkrun YAML, each file as each commit left it): each commit that adds or changes a
recipe file makes one revision of it, written by the commit's author; a file that does not check
is skipped with its reason.

The author becomes the account ``git-<name>`` (created without a password or token, so nobody can
sign in as it; the e-mail address is never stored). Each revision keeps its source (the repository
as given, the path, the commit and its date) in ``git_sources``, which makes a second import of the
same history add nothing, and the recipe page links back to the file at that commit. A slug that
already exists and was not imported from this repository is never written to (skipped, saying so);
content equal to the recipe's latest revision adds no revision. Deleting a file deletes nothing:
a registry keeps its revisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.errors import LairError
from lair.registry.db.tables import GIT_SOURCES, RECIPES, REVISIONS
from lair.registry.service.canonical import canonical, parse_recipe
from lair.registry.service.facets import slugify
from lair.registry.service.publish import add_revision, publish
from lair.registry.service.stored import changed

__all__ = ["GitFile", "GitImport", "import_git"]


@dataclass
class GitImport:
    """What an import did: revisions written (slug, revision, path, commit) and files skipped (path,
    commit, why)."""

    repo: str
    written: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    unchanged: int = 0


def _owned_elsewhere(conn: Connection, slug: str, repo: str) -> bool:
    """The slug exists and none of its revisions came from this repository."""
    rid = conn.execute(sa.select(RECIPES.c.id).where(RECIPES.c.slug == slug)).scalar()
    if rid is None:
        return False
    mine = sa.select(GIT_SOURCES.c.id).where(GIT_SOURCES.c.recipe_id == rid, GIT_SOURCES.c.repo == repo)
    return conn.execute(mine.limit(1)).first() is None


def _latest_sha(conn: Connection, slug: str) -> str | None:
    stmt = (
        sa.select(REVISIONS.c.sha256)
        .join(
            RECIPES,
            (RECIPES.c.id == REVISIONS.c.recipe_id) & (REVISIONS.c.number == RECIPES.c.latest_revision),
        )
        .where(RECIPES.c.slug == slug)
    )
    return conn.execute(stmt).scalar()


def _revision_id(conn: Connection, slug: str, number: int) -> tuple[int, int]:
    stmt = (
        sa.select(RECIPES.c.id, REVISIONS.c.id.label("rev"))
        .join(REVISIONS, REVISIONS.c.recipe_id == RECIPES.c.id)
        .where(RECIPES.c.slug == slug, REVISIONS.c.number == number)
    )
    row = conn.execute(stmt).one()
    return int(row.id), int(row.rev)


class GitFile(Protocol):
    """One recipe file as one commit left it (:class:`lair.interop.git_history.GitRecipe`)."""

    @property
    def commit(self) -> str: ...
    @property
    def author(self) -> str: ...
    @property
    def committed_at(self) -> datetime: ...
    @property
    def path(self) -> str: ...
    @property
    def subject(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def slug(self) -> str: ...
    @property
    def why(self) -> str: ...


def import_git(conn: Connection, history: Sequence[GitFile], label: str) -> GitImport:
    """Load a repository's recipe history (oldest first, as
    :func:`lair.interop.git_history.recipe_history` reads it), stored as coming from ``label`` (the
    path or URL the operator gave), in one transaction (the caller's)."""
    result = GitImport(label)
    mine = sa.select(GIT_SOURCES.c.path, GIT_SOURCES.c.commit).where(GIT_SOURCES.c.repo == label)
    seen = {(r.path, r.commit) for r in conn.execute(mine)}
    touched: list[int] = []
    for f in history:
        if (f.path, f.commit) in seen:
            continue
        if f.why:
            result.skipped.append({"path": f.path, "commit": f.commit, "why": f.why})
            continue
        if _owned_elsewhere(conn, f.slug, label):
            why = f"the registry has a recipe {f.slug!r} that was not imported from this repository"
            result.skipped.append({"path": f.path, "commit": f.commit, "why": why})
            continue
        latest = _latest_sha(conn, f.slug)
        try:  # the registry's own check, before anything of this file is written
            recipe = parse_recipe(f.text, PurePosixPath(f.path).name)
        except LairError as exc:
            result.skipped.append({"path": f.path, "commit": f.commit, "why": str(exc).splitlines()[0][:300]})
            continue
        if latest == canonical(recipe)[1]:
            result.unchanged += 1
            continue
        owner = "git-" + (slugify(f.author) or "unknown")[:40]
        notes = f"{f.subject} ({f.path} @ {f.commit[:12]})"
        if latest is None:
            done = publish(conn, recipe, owner=owner, slug=f.slug, notes=notes)
        else:
            done = add_revision(conn, f.slug, recipe, author=owner, notes=notes)
        recipe_id, revision_id = _revision_id(conn, f.slug, done.revision)
        conn.execute(
            sa.insert(GIT_SOURCES).values(
                recipe_id=recipe_id, revision_id=revision_id, repo=label, path=f.path, commit=f.commit,
                committed_at=f.committed_at,
            )
        )  # fmt: skip
        result.written.append({"slug": f.slug, "revision": done.revision, "path": f.path, "commit": f.commit})
        touched.append(recipe_id)
    if touched:  # the stored documents were rendered before their source rows existed
        changed(conn, touched)
    return result
