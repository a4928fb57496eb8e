"""The git source of a recipe's revision, when ``lair registry import-git`` loaded it
(:mod:`.git_import`): read for the recipe page and its JSON twin."""

from __future__ import annotations

import weakref
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from lair.registry.db.tables import GIT_SOURCES, REVISIONS
from lair.registry.service.timefmt import iso

__all__ = ["revision_source", "source_link"]

_AT_0018: weakref.WeakSet[Engine] = weakref.WeakSet()


def _has_table(conn: Connection) -> bool:
    """Whether the database has migration 0018's table (remembered per engine once it has)."""
    if conn.engine in _AT_0018:
        return True
    if sa.inspect(conn).has_table(GIT_SOURCES.name):
        _AT_0018.add(conn.engine)
        return True
    return False


def source_link(repo: str, path: str, commit: str) -> str | None:
    """The file at the commit on its forge's web page, for an https repository URL (GitHub's and
    Gitea's ``/blob/``, GitLab's ``/-/blob/``); None for a local path (shown as text)."""
    if not repo.startswith("https://"):
        return None
    base = repo.removesuffix("/").removesuffix(".git")
    return f"{base}{'/-/blob/' if 'gitlab' in base else '/blob/'}{commit}/{path}"


def revision_source(conn: Connection, recipe_id: int, number: int) -> dict[str, Any] | None:
    """``{repo, path, commit, committed_at, link}`` of the revision, or None (not imported from git,
    or a database before migration 0018)."""
    if not _has_table(conn):
        return None
    stmt = (
        sa.select(GIT_SOURCES)
        .join(REVISIONS, REVISIONS.c.id == GIT_SOURCES.c.revision_id)
        .where(REVISIONS.c.recipe_id == recipe_id, REVISIONS.c.number == number)
    )
    r = conn.execute(stmt.limit(1)).first()
    if r is None:
        return None
    return {
        "repo": r.repo,
        "path": r.path,
        "commit": r.commit,
        "committed_at": iso(r.committed_at),
        "link": source_link(r.repo, r.path, r.commit),
    }
