"""The front's stored-document reads (SQLite and PostgreSQL) give back the stored rows.

The oracle is the ``recipe_documents`` table read through SQLAlchemy. On PostgreSQL, reads that
arrive together share one query (at most ``BATCH`` keys each), which is observed by counting the
batches the connection is asked for; a key without a row is None, and a key read twice in one batch
is asked for once.
"""

from __future__ import annotations

import asyncio
import tomllib

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA, SEED_000
from sqlalchemy import Engine

from lair.registry.service.publish import publish
from lair.registry.service.stored import DOCUMENTS
from lair.registry.web import cache

SLUGS = [tomllib.loads(p.read_text())["meta"]["slug"] for p in (LLAMA, SEED_000)]
Key = tuple[str, str, int]


def _table(engine: Engine) -> dict[Key, tuple[bytes, str, str]]:
    d = DOCUMENTS.c
    with engine.connect() as conn:
        rows = conn.execute(sa.select(d.slug, d.kind, d.revision, d.body, d.etag, d.modified))
        return {(r.slug, r.kind, r.revision): (bytes(r.body), r.etag, r.modified) for r in rows}


def _read_all(url: str, keys: list[Key], batches: list[int] | None) -> list[cache.Document | None]:
    versions = cache.make_versions(url)
    if batches is not None:
        assert isinstance(versions, cache.PgVersions)
        real = versions._query

        async def counted(ks: list[Key]) -> dict[Key, object]:
            batches.append(len(ks))
            return await real(ks)

        versions._query = counted  # type: ignore[method-assign,assignment]

    async def go() -> list[cache.Document | None]:
        try:
            return await asyncio.gather(*(versions.document(*k) for k in keys))
        finally:
            await versions.close()

    return asyncio.run(go())


def test_each_read_is_the_stored_row_and_a_missing_one_is_none(db_url: str, engine: Engine) -> None:
    with engine.begin() as conn:
        for p in (LLAMA, SEED_000):
            publish(conn, p.read_text(), owner="owner")
    table = _table(engine)
    assert {k[1] for k in table} == {"json", "page"} and {k[0] for k in table} == set(SLUGS)
    keys = [*table, ("no-such-recipe", "json", 0), (SLUGS[0], "page", 99)]
    keys = keys * 3  # the same key several times in one batch
    pg = engine.dialect.name == "postgresql"
    batches: list[int] | None = [] if pg else None
    got = _read_all(db_url.replace("+psycopg", ""), keys, batches)
    assert got == [table.get(k) for k in keys]
    assert got.count(None) == 6
    if pg:
        assert batches == [len(set(keys))]  # one query for every distinct key that arrived together


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # SQLite reads one by one on the loop
def test_more_reads_than_a_batch_take_several_queries(db_url: str, engine: Engine) -> None:
    with engine.begin() as conn:
        publish(conn, LLAMA.read_text(), owner="owner")
    table = _table(engine)
    keys: list[Key] = [(SLUGS[0], "json", 0)] + [(f"missing-{i}", "json", 0) for i in range(150)]
    batches: list[int] = []
    got = _read_all(db_url.replace("+psycopg", ""), keys, batches)
    assert got[0] == table[(SLUGS[0], "json", 0)] and got[1:] == [None] * 150
    assert sorted(batches, reverse=True) == [cache.PgVersions.BATCH] * 2 + [151 - 2 * cache.PgVersions.BATCH]
