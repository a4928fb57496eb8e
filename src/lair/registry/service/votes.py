"""A vote's write to the stored documents: the new count put in place of the old one, nothing rendered.

The count is the one thing a vote changes in what a recipe's URLs show. It appears once in the
recipe's JSON (``"votes":N``, among the scalar keys before any user text), once in the revision JSON
(the same document with three keys more) and once in the anonymous page (``<span class="count"
id="votes">N</span>``); the revision page does not show it. So instead of rendering the documents
again (a read of the recipe, the page's view model and two templates: most of a vote's time, and on
the thread the event loop shares the GIL with), a vote rewrites those digits in the stored bytes and
hashes them again. The result is what a fresh render with the new count gives, byte for byte (the
tests render each document at two counts and compare). When a mark is not found exactly once (user
text that happens to hold one, a template that changed) the documents are rendered as any other write
renders them.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.registry.db.tables import VERSION
from lair.registry.service.changes import record
from lair.registry.service.stored import DOCUMENTS, _etag, _stored_schema, refresh_documents

__all__ = ["MARKS", "count_vote", "with_count"]

MARKS = {"json": (b',"votes":', b","), "page": (b'<span class="count" id="votes">', b"</span>")}
"""Per kind of document: the bytes before the count and the bytes after it."""

_ROWS = sa.select(DOCUMENTS.c.slug, DOCUMENTS.c.kind, DOCUMENTS.c.revision, DOCUMENTS.c.body).where(
    DOCUMENTS.c.recipe_id == sa.bindparam("rid")
)
_SET = (
    sa.update(DOCUMENTS)
    .where(
        DOCUMENTS.c.slug == sa.bindparam("s"),
        DOCUMENTS.c.kind == sa.bindparam("k"),
        DOCUMENTS.c.revision == sa.bindparam("r"),
    )
    .values(body=sa.bindparam("b"), etag=sa.bindparam("e"))
)
_VOTED = (
    sa.update(VERSION).where(VERSION.c.id == 1).values(votes=VERSION.c.votes + 1).returning(VERSION.c.votes)
)


def shows_count(kind: str, revision: int) -> bool:
    """Whether a stored document shows the vote count (every JSON document, and the recipe page)."""
    return kind == "json" or revision == 0


def with_count(body: bytes, kind: str, votes: int) -> bytes | None:
    """``body`` with ``votes`` in place of the count it shows; None unless its mark is there exactly
    once with a count after it."""
    mark = MARKS.get(kind)
    if mark is None:
        return None
    before, after = mark
    i = body.find(before)
    if i < 0 or body.find(before, i + 1) >= 0:
        return None
    i += len(before)
    j = body.find(after, i)
    if j < 0 or not body[i:j].isdigit():
        return None
    return body[:i] + str(votes).encode() + body[j:]


def _updates(rows: list[Any], votes: int) -> list[dict[str, Any]] | None:
    out = []
    for r in rows:
        if not shows_count(r.kind, r.revision):
            continue
        body = with_count(bytes(r.body), r.kind, votes)
        if body is None:
            return None
        out.append({"s": r.slug, "k": r.kind, "r": r.revision, "b": body, "e": _etag(body)})
    return out


def count_vote(conn: Connection, recipe_id: int, votes: int) -> None:
    """After a vote (``n`` bumped first, by the vote): the vote version (lists show the count within
    ``VOTE_TTL_S``, :mod:`lair.registry.web.cache`) and the recipe's stored documents with the new
    count, rendered again only when they cannot be rewritten (or there are none yet)."""
    if not _stored_schema(conn):  # a database before migration 0009 (tests of older migrations)
        return
    record("votes", conn.execute(_VOTED).scalar_one(), [recipe_id])  # for the lists' cache
    rows = list(conn.execute(_ROWS, {"rid": recipe_id}))
    updates = _updates(rows, votes) if rows else None
    if updates is None:
        refresh_documents(conn, recipe_id)
    elif updates:
        conn.execute(_SET, updates)
