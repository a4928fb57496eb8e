"""A vote rewrites the count in the stored documents instead of rendering them (SQLite and PostgreSQL).

The oracle is a fresh render (:func:`render_documents`) from the tables after each vote. That the
count is the only thing a vote changes is checked on renders themselves: a recipe rendered at two
counts differs only where :func:`with_count` writes, and the revision page not at all.
"""

from __future__ import annotations

import tomllib

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA, SEED_000
from sqlalchemy import Engine

from lair.registry.db.tables import RECIPES
from lair.registry.service import community, votes
from lair.registry.service.accounts import create_user
from lair.registry.service.actor import Actor
from lair.registry.service.publish import publish
from lair.registry.service.stored import DOCUMENTS, render_documents

SLUG = tomllib.loads(LLAMA.read_text())["meta"]["slug"]
SEED = tomllib.loads(SEED_000.read_text())["meta"]["slug"]
ODD = "odd-env"
ODD_TOML = (
    'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\n[env]\nA = "1"\nvotes = "2"\n'
    f'[meta]\ntitle = "Env named votes"\nslug = "{ODD}"\n'
)
"""A recipe whose JSON holds the mark twice: ``"env":{"A":"1","votes":"2"}`` after the count."""


def _stored(conn: sa.Connection, slug: str) -> dict[tuple[str, int], tuple[bytes, str, str]]:
    d = DOCUMENTS.c
    rows = conn.execute(sa.select(d.kind, d.revision, d.body, d.etag, d.modified).where(d.slug == slug))
    return {(r.kind, r.revision): (bytes(r.body), r.etag, r.modified) for r in rows}


def _fresh(conn: sa.Connection, slug: str) -> dict[tuple[str, int], tuple[bytes, str, str]]:
    return {
        (r["kind"], r["revision"]): (r["body"], r["etag"], r["modified"])
        for r in render_documents(conn, slug)
    }


@pytest.fixture
def voters(engine: Engine) -> list[Actor]:
    with engine.begin() as conn:
        publish(conn, LLAMA.read_text(), owner="owner")
        publish(conn, SEED_000.read_text(), owner="owner")
        publish(conn, ODD_TOML, owner="owner")
        return [Actor(create_user(conn, f"v{i}"), f"v{i}", False) for i in range(3)]


def _renders(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The recipe ids the votes module renders again (the fallback), recorded."""
    seen: list[int] = []
    real = votes.refresh_documents

    def spy(conn: sa.Connection, rid: int) -> None:
        seen.append(rid)
        real(conn, rid)

    monkeypatch.setattr(votes, "refresh_documents", spy)
    return seen


def test_votes_rewrite_the_count_as_a_fresh_render_would(
    engine: Engine, voters: list[Actor], monkeypatch: pytest.MonkeyPatch
) -> None:
    renders = _renders(monkeypatch)
    slugs = [SLUG, SEED]
    expected = {s: 0 for s in slugs}
    for i, (slug, who, on) in enumerate(
        [(SLUG, 0, True), (SLUG, 1, True), (slugs[1], 0, True), (SLUG, 0, False), (SLUG, 0, True),
         (SLUG, 2, True), (SLUG, 2, True), (slugs[1], 0, False), (SLUG, 1, False)]
    ):  # fmt: skip
        with engine.begin() as conn:
            before = _stored(conn, slug)
            got = community.vote(conn, voters[who], slug, on)
        expected[slug] = got
        with engine.connect() as conn:
            after, fresh = _stored(conn, slug), _fresh(conn, slug)
        assert after == fresh, f"vote {i} on {slug}: stored documents differ from a fresh render"
        assert after[("page", 1)] == before[("page", 1)]  # the revision page does not show the count
        assert f'<span class="count" id="votes">{got}</span>'.encode() in after[("page", 0)][0]
    assert expected == {SLUG: 2, slugs[1]: 0}
    assert renders == []  # every vote rewrote the bytes, none rendered


def test_the_count_is_all_that_differs_between_two_renders(engine: Engine, voters: list[Actor]) -> None:
    renders = {}
    for count in (7, 12345):
        with engine.begin() as conn:
            conn.execute(sa.update(RECIPES).where(RECIPES.c.slug == SLUG).values(votes=count))
            renders[count] = _fresh(conn, SLUG)
    assert renders[7].keys() == renders[12345].keys() == {("json", 0), ("page", 0), ("json", 1), ("page", 1)}
    for (kind, revision), (body, _, modified) in renders[7].items():
        want, _, want_modified = renders[12345][(kind, revision)]
        assert modified == want_modified
        if votes.shows_count(kind, revision):
            assert body != want and votes.with_count(body, kind, 12345) == want, (kind, revision)
        else:
            assert body == want, (kind, revision)


def test_a_second_mark_in_user_text_makes_the_vote_render(
    engine: Engine, voters: list[Actor], monkeypatch: pytest.MonkeyPatch
) -> None:
    with engine.connect() as conn:
        body = _stored(conn, ODD)[("json", 0)][0]
        rid = conn.execute(sa.select(RECIPES.c.id).where(RECIPES.c.slug == ODD)).scalar_one()
    assert body.count(votes.MARKS["json"][0]) == 2  # the count and the env variable
    assert votes.with_count(body, "json", 1) is None
    renders = _renders(monkeypatch)
    with engine.begin() as conn:
        assert community.vote(conn, voters[0], ODD, True) == 1
    with engine.connect() as conn:
        stored = _stored(conn, ODD)
        assert stored == _fresh(conn, ODD)
    assert renders == [rid] and b'"votes":1,' in stored[("json", 0)][0]


def test_a_recipe_without_stored_documents_gets_them_rendered_by_a_vote(
    engine: Engine, voters: list[Actor]
) -> None:
    with engine.begin() as conn:
        conn.execute(sa.delete(DOCUMENTS).where(DOCUMENTS.c.slug == SLUG))
        community.vote(conn, voters[0], SLUG, True)
    with engine.connect() as conn:
        stored = _stored(conn, SLUG)
        assert len(stored) == 4 and stored == _fresh(conn, SLUG)


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b'{"a":1,"votes":12}', "json"),  # no comma after the count
        (b'{"a":1,"votes":-1,"b":2}', "json"),  # not a count
        (b'<span class="count" id="votes">3', "page"),  # no end
        (b"<p>no mark</p>", "page"),
        (b'{"a":1,"votes":3,"b":2}', "toml"),  # no mark for the kind
    ],
)
def test_with_count_refuses_what_it_cannot_rewrite(body: bytes, kind: str) -> None:
    assert votes.with_count(body, kind, 4) is None


def test_with_count_rewrites_one_count_of_any_width() -> None:
    assert votes.with_count(b'{"a":1,"votes":9,"b":2}', "json", 10) == b'{"a":1,"votes":10,"b":2}'
    page = b'<b>x</b><span class="count" id="votes">100</span> sign in'
    assert votes.with_count(page, "page", 0) == b'<b>x</b><span class="count" id="votes">0</span> sign in'
