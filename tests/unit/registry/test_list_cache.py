"""Cached lists and searches are kept across the writes that do not change them, and only those
(SQLite and PostgreSQL).

Whether an answer came from the cache is shown as in the two-process test: a title changed behind
the app's back (no counter bumped) appears only in a page rendered again. The writes go through the
JSON API, the page forms and the report upload (what the app records), except the one made through
the service layer as the CLI makes it, which the app cannot know.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from starlette.testclient import TestClient
from upload_site import Site as UploadSite
from upload_site import make_site

from lair.registry.db.tables import RECIPES
from lair.registry.service.accounts import create_session, create_token, create_user
from lair.registry.service.actor import Actor
from lair.registry.service.publish import add_revision, publish
from lair.registry.web import lists, middleware
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.uploads import encode, tar_gz


def _toml(slug: str, tag: str, title: str = "") -> str:
    return (
        f'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\n[meta]\ntitle = "{title or slug}"\n'
        f'slug = "{slug}"\ntags = ["{tag}"]\n'
    )


RECIPES_AT_START = {"a1": "alpha", "a2": "alpha", "a3": "alpha", "b1": "beta", "b2": "beta"}


@dataclass
class Site:
    client: TestClient
    engine: Engine
    auth: dict[str, dict[str, str]]

    def listed(self, url: str) -> list[tuple[str, str]]:
        """(slug, title) of each item, read anonymously (through the cache)."""
        got = self.client.get(url)
        assert got.status_code == 200, got.text
        return [(i["slug"], i["title"]) for i in got.json()["items"]]

    def behind_the_back(self, slug: str, title: str) -> None:
        """A title changed without any counter bumped: only a page rendered again shows it."""
        with self.engine.begin() as conn:
            conn.execute(sa.update(RECIPES).where(RECIPES.c.slug == slug).values(title=title))

    def vote(self, who: str, slug: str, on: bool = True) -> None:
        method = "PUT" if on else "DELETE"
        got = self.client.request(method, f"/api/v1/recipes/{slug}/vote", headers=self.auth[who])
        assert got.status_code == 200, got.text

    def revise(self, slug: str, tag: str, title: str = "") -> None:
        body = {"toml": _toml(slug, tag, title), "notes": "edit"}
        got = self.client.post(f"/api/v1/recipes/{slug}/revisions", json=body, headers=self.auth["owner"])
        assert got.status_code == 201, got.text


@pytest.fixture
def site(engine: Engine, db_url: str) -> Iterator[Site]:
    reset_limits()
    with engine.begin() as conn:
        owner = create_user(conn, "owner")
        auth = {"owner": create_token(conn, owner)}
        auth |= {f"v{i}": create_token(conn, create_user(conn, f"v{i}")) for i in range(3)}
        for slug, tag in RECIPES_AT_START.items():
            publish(conn, _toml(slug, tag), owner="owner")
    headers = {k: {"authorization": f"Bearer {v}"} for k, v in auth.items()}
    with TestClient(create_app(db_url)) as client:
        yield Site(client, engine, headers)


@pytest.fixture
def no_vote_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Votes checked at once (instead of within ``VOTE_TTL_S``), so that a test need not wait."""
    monkeypatch.setattr(middleware, "VOTE_TTL_S", 0.0)
    monkeypatch.setattr(lists, "VOTE_TTL_S", 0.0)


ALPHA = "/api/v1/recipes?tag=alpha&sort=updated"


def _titles(items: list[tuple[str, str]]) -> dict[str, str]:
    return dict(items)


def test_a_revision_elsewhere_keeps_the_page_and_one_on_it_or_entering_it_does_not(site: Site) -> None:
    before = site.listed(ALPHA)
    assert [s for s, _ in before] == ["a3", "a2", "a1"]  # newest first
    site.behind_the_back("a1", "changed behind the back")
    site.revise("b1", "beta", "b1 again")  # neither on the page nor matching it
    assert site.listed(ALPHA) == before  # kept: the title changed behind the back is not shown
    assert _titles(site.listed("/api/v1/recipes?tag=beta&sort=updated"))["b1"] == "b1 again"

    site.revise("a2", "alpha", "a2 again")  # on the page: rendered again
    after = site.listed(ALPHA)
    assert [s for s, _ in after] == ["a2", "a3", "a1"]
    assert _titles(after) == {"a1": "changed behind the back", "a2": "a2 again", "a3": "a3"}

    site.behind_the_back("a3", "a3 behind the back")
    site.revise("b2", "alpha", "b2 now alpha")  # entering the page
    entered = site.listed(ALPHA)
    assert [s for s, _ in entered] == ["b2", "a2", "a3", "a1"]
    assert _titles(entered)["a3"] == "a3 behind the back"


def test_a_write_the_app_did_not_make_renders_the_page_again(site: Site) -> None:
    before = site.listed(ALPHA)
    site.behind_the_back("a1", "changed behind the back")
    with site.engine.begin() as conn:  # as the CLI writes: through the service layer, not this app
        add_revision(conn, "b1", _toml("b1", "beta"), author="owner", notes="elsewhere")
    assert site.listed(ALPHA) != before
    assert _titles(site.listed(ALPHA))["a1"] == "changed behind the back"


def test_votes_keep_the_pages_they_do_not_reach(site: Site, no_vote_delay: None) -> None:
    top = "/api/v1/recipes?tag=alpha&sort=votes&limit=2"  # a page that ends before the last match
    site.vote("v0", "a1")
    site.vote("v1", "a1")
    before = site.listed(top)
    assert [s for s, _ in before] == ["a1", "a3"]  # two votes, then the newest id among the rest
    site.behind_the_back("a3", "a3 behind the back")
    site.vote("v0", "b1")  # another tag: not on the page, cannot enter it
    assert site.listed(top) == before
    site.vote("v2", "a2")  # one vote: a2 passes a3 and enters
    after = site.listed(top)
    assert after == [("a1", "a1"), ("a2", "a2")]
    site.behind_the_back("a2", "a2 behind the back")
    site.vote("v0", "a3", on=False)  # a3 (no vote to take back: still none) stays below the page's end
    assert site.listed(top) == after
    site.vote("v1", "a2")  # on the page: rendered again
    assert site.listed(top) == [("a2", "a2 behind the back"), ("a1", "a1")]


@pytest.mark.parametrize("sort", ["votes", "updated", "decode"])
def test_kept_pages_equal_what_the_route_renders(
    site: Site, db_url: str, no_vote_delay: None, sort: str
) -> None:
    """After a run of writes, every cached page is what a fresh render gives (an app of its own)."""
    urls = [f"/api/v1/recipes?sort={sort}&limit={n}" for n in (1, 2, 5)]
    urls += [f"/api/v1/recipes?tag={t}&sort={sort}" for t in ("alpha", "beta")]
    for u in urls:
        site.listed(u)
    for who, slug in (("v0", "a1"), ("v1", "b2"), ("v0", "a3"), ("v2", "a1")):
        site.vote(who, slug)
        for u in urls:
            site.listed(u)
    site.revise("b1", "alpha", "b1 moved")
    cached = {u: site.listed(u) for u in urls}
    with TestClient(create_app(db_url)) as fresh:  # an empty cache: every page rendered
        rendered: dict[str, Any] = {
            u: [(i["slug"], i["title"]) for i in fresh.get(u).json()["items"]] for u in urls
        }
    assert cached == rendered


def _session(site: Site) -> tuple[dict[str, str], str]:
    """The owner's session, as a browser signed in on the site holds it: (cookie header, CSRF token)."""
    with site.engine.begin() as conn:
        uid = conn.execute(sa.text("SELECT id FROM users WHERE name = 'owner'")).scalar_one()
        sid, csrf = create_session(conn, Actor(uid, "owner"))
    return {"cookie": f"lair_session={sid}"}, csrf


def test_the_page_forms_keep_the_pages_their_writes_do_not_reach(site: Site, no_vote_delay: None) -> None:
    """The forms' writes are known to the app as the API's are (before, each rendered every list again)."""
    cookie, csrf = _session(site)

    def form(url: str, fields: dict[str, str]) -> None:
        got = site.client.post(url, data=fields | {"csrf": csrf}, headers=cookie, follow_redirects=False)
        assert got.status_code == 303, got.text

    before = site.listed(ALPHA)
    site.behind_the_back("a1", "a1 behind the back")
    form("/recipes/b1/edit", {"toml": _toml("b1", "beta", "b1 by form"), "notes": "form"})
    assert site.listed(ALPHA) == before  # kept
    assert _titles(site.listed("/api/v1/recipes?tag=beta&sort=updated"))["b1"] == "b1 by form"
    form("/recipes/b2/vote", {"vote": "on"})  # another tag: cannot reach the page
    assert site.listed(ALPHA) == before
    form("/recipes/a3/edit", {"toml": _toml("a3", "alpha", "a3 by form"), "notes": "form"})  # on it
    assert site.listed(ALPHA) == [("a3", "a3 by form"), ("a2", "a2"), ("a1", "a1 behind the back")]
    site.behind_the_back("a2", "a2 behind the back")
    form("/recipes/a1/vote", {"vote": "on"})  # a vote for a recipe on the page: rendered again
    assert _titles(site.listed(ALPHA))["a2"] == "a2 behind the back"


@pytest.fixture
def uploads(db_url: str, engine: Engine) -> Iterator[tuple[UploadSite, dict[str, str]]]:
    """The bundled examples and an uploader (upload_site.py); the client reads anonymously, the
    uploads carry the token."""
    for s in make_site(db_url, engine):
        auth = {"authorization": s.client.headers.pop("authorization")}
        yield s, auth


def _rows_of(engine: Engine, slug: str) -> int:
    stmt = sa.text(
        "SELECT count(*) FROM measurements m JOIN recipes r ON r.id = m.recipe_id WHERE r.slug = :slug"
    )
    with engine.connect() as conn:
        return int(conn.execute(stmt, {"slug": slug}).scalar_one())


def test_a_report_upload_keeps_the_pages_its_recipe_is_not_on(
    uploads: tuple[UploadSite, dict[str, str]],
) -> None:
    up, auth = uploads
    site = Site(up.client, up.engine, {})
    with up.engine.connect() as conn:
        titles = {slug: title for slug, title in conn.execute(sa.select(RECIPES.c.slug, RECIPES.c.title))}
    vllm, cpu = "/api/v1/recipes?tag=vllm&sort=updated", "/api/v1/recipes?tag=cpu&sort=updated"
    before = {u: site.listed(u) for u in (vllm, cpu)}
    assert sorted(before[vllm]) == [(s, titles[s]) for s in ("tiny-vllm-cpu", "tiny-vllm-cpu-docker-2x")]
    assert "tiny-cpu" in _titles(before[cpu])
    site.behind_the_back("tiny-vllm-cpu", "behind the back")  # on both pages
    rows = _rows_of(up.engine, "tiny-cpu")

    headers = auth | {"content-type": "application/gzip"}
    got = up.client.post("/api/v1/reports", content=tar_gz(encode(up.report())), headers=headers)
    assert got.status_code == 201, got.text
    assert got.json()["slug"] == "tiny-cpu"
    assert _rows_of(up.engine, "tiny-cpu") == rows + len(got.json()["rows"]) > rows  # it wrote tiny-cpu

    assert site.listed(vllm) == before[vllm]  # tiny-cpu is neither on it nor can enter it: kept
    assert _titles(site.listed(cpu))["tiny-vllm-cpu"] == "behind the back"  # tiny-cpu is on it: rendered
