"""An admin hides a recipe or a user (API and page actions) on SQLite and PostgreSQL: a hidden user's
recipes leave search, pages, the JSON API, llms.txt and the writes, their sign-in and tokens stop
working, the speed and quality rows they gave other people's recipes stop showing and counting, and
showing them again brings everything back; the response cache never serves the old."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.db.tables import QUALITY, RECIPES, REVISIONS, USERS
from lair.registry.db.version import now
from lair.registry.service.accounts import create_session, create_token, create_user
from lair.registry.service.actor import Actor
from lair.registry.service.publish import publish
from lair.registry.service.stored import changed
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.registry import add_verified_row

SLUG = tomllib.loads(LLAMA.read_text())["meta"]["slug"]
OTHER_SLUG = "bystander-recipe"
PASSWORD = "owner-long-password"


@dataclass
class Site:
    client: TestClient
    tokens: dict[str, str]
    sessions: dict[str, tuple[str, str]]  # name: (cookie value, CSRF token)


@pytest.fixture
def site(engine: Engine, db_url: str) -> Iterator[Site]:
    reset_limits()
    tokens, sessions = {}, {}
    with engine.begin() as conn:
        for name, admin in (("owner", False), ("other", False), ("admin", True)):
            uid = create_user(conn, name, PASSWORD if name == "owner" else None, admin=admin)
            tokens[name] = create_token(conn, uid)
            sessions[name] = create_session(conn, Actor(uid, name, admin))
        publish(conn, LLAMA.read_text(), owner="owner")
        other = 'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\n'
        publish(conn, other + f'[meta]\ntitle = "Bystander"\nslug = "{OTHER_SLUG}"\n', owner="other")
    with TestClient(create_app(db_url), raise_server_exceptions=False) as client:
        yield Site(client, tokens, sessions)


def _bearer(site: Site, who: str) -> dict[str, str]:
    return {"authorization": f"Bearer {site.tokens[who]}"}


def _as(site: Site, who: str) -> TestClient:
    """A browser-like client signed in as ``who`` through a session cookie."""
    return TestClient(site.client.app, cookies={"lair_session": site.sessions[who][0]})


def _listed(site: Site, query: str = "") -> set[str]:
    return {i["slug"] for i in site.client.get("/api/v1/recipes" + query).json()["items"]}


def _visible_urls(site: Site) -> dict[str, int]:
    c = site.client
    urls = [
        f"/recipes/{SLUG}",
        f"/recipes/{SLUG}.json",
        f"/api/v1/recipes/{SLUG}.json",
        f"/api/v1/recipes/{SLUG}.toml",
        f"/api/v1/recipes/{SLUG}/revisions/1.json",
        f"/recipes/{SLUG}/revisions/1",
        f"/recipes/{SLUG}/compare",
    ]
    return {u: c.get(u).status_code for u in urls}


def test_a_hidden_users_recipes_disappear_everywhere_and_come_back(site: Site) -> None:
    c = site.client
    words = "?q=" + LLAMA.read_text().split('title = "', 1)[1].split()[0]
    assert SLUG in _listed(site) and SLUG in _listed(site, words) and SLUG in c.get("/").text
    assert set(_visible_urls(site).values()) == {200}  # the cache is warm for every one of them
    r = c.put("/api/v1/users/owner/hidden", headers=_bearer(site, "admin"))
    assert r.status_code == 200 and r.json() == {"ok": True, "name": "owner", "hidden": True}

    assert SLUG not in _listed(site) and SLUG not in _listed(site, words) and OTHER_SLUG in _listed(site)
    assert SLUG not in c.get("/").text and SLUG not in c.get("/llms.txt").text
    assert set(_visible_urls(site).values()) == {404}
    page = c.get(f"/recipes/{SLUG}")
    assert page.headers["content-type"].startswith("text/html") and "no recipe" in page.text
    assert c.get(f"/api/v1/recipes/{SLUG}.json").json()["error"]["code"] == "not_found"
    assert c.post(f"/api/v1/recipes/{SLUG}/fork", headers=_bearer(site, "other")).status_code == 404
    assert c.put(f"/api/v1/recipes/{SLUG}/vote", headers=_bearer(site, "other")).status_code == 404
    # the hidden user can no longer act: token, session and password all refused
    assert c.put(f"/api/v1/recipes/{OTHER_SLUG}/vote", headers=_bearer(site, "owner")).status_code == 401
    assert _as(site, "owner").get("/").text.count('id="me"') == 0
    assert c.post("/api/v1/session", json={"name": "owner", "password": PASSWORD}).status_code == 401

    assert c.delete("/api/v1/users/owner/hidden", headers=_bearer(site, "admin")).status_code == 200
    assert SLUG in _listed(site) and set(_visible_urls(site).values()) == {200}
    assert c.put(f"/api/v1/recipes/{OTHER_SLUG}/vote", headers=_bearer(site, "owner")).json()["votes"] == 1


def test_hiding_a_user_keeps_a_recipe_the_admin_hid_hidden(site: Site) -> None:
    """The two hides are separate: showing the user again does not show a recipe hidden on its own."""
    admin, c = _bearer(site, "admin"), site.client
    assert c.put(f"/api/v1/recipes/{SLUG}/hidden", headers=admin).status_code == 200
    assert c.put("/api/v1/users/owner/hidden", headers=admin).status_code == 200
    assert c.delete("/api/v1/users/owner/hidden", headers=admin).status_code == 200
    assert c.get(f"/recipes/{SLUG}").status_code == 404
    assert c.delete(f"/api/v1/recipes/{SLUG}/hidden", headers=admin).status_code == 200
    assert c.get(f"/recipes/{SLUG}").status_code == 200


def test_an_admin_cannot_hide_themselves_and_an_unknown_user_is_404(site: Site) -> None:
    c, admin = site.client, _bearer(site, "admin")
    me = c.put("/api/v1/users/admin/hidden", headers=admin)
    assert me.status_code == 403 and me.json()["error"]["code"] == "forbidden"
    assert c.put("/api/v1/users/nobody/hidden", headers=admin).json()["error"]["status"] == 404


def _csrf_of(html: str, form_id: str) -> str:
    m = re.search(rf'<form[^>]*id="{form_id}"[^>]*>\s*<input type="hidden" name="csrf" value="([^"]+)"', html)
    assert m, f"no form #{form_id}"
    return m.group(1)


@pytest.mark.parametrize(("form_id", "action"), [("hide-user", "/users/owner/hide"),
                                                  ("hide-recipe", f"/recipes/{SLUG}/hide")])  # fmt: skip
def test_the_admins_page_actions_hide(site: Site, form_id: str, action: str) -> None:
    admin = _as(site, "admin")
    page = admin.get(f"/recipes/{SLUG}").text
    assert f'action="{action}"' in page
    for who in ("other", "owner"):  # the forms are an admin's only; the service refuses the others
        browser = _as(site, who)
        assert f'id="{form_id}"' not in browser.get(f"/recipes/{SLUG}").text
        refused = browser.post(action, data={"csrf": site.sessions[who][1]}, follow_redirects=False)
        assert refused.status_code == 403 and "only an admin" in refused.text
    done = admin.post(action, data={"csrf": _csrf_of(page, form_id)}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/"
    assert site.client.get(f"/recipes/{SLUG}").status_code == 404 and SLUG not in _listed(site)
    assert OTHER_SLUG in _listed(site)


def _rows_of(site: Site, slug: str) -> tuple[list[tuple[str | None, float]], list[str | None]]:
    """(submitter, decode speed) of the recipe's verified speed rows, and its quality rows' submitters."""
    doc = site.client.get(f"/api/v1/recipes/{slug}.json").json()
    speeds = [(m["submitted_by"], m["decode_tok_s"]) for m in doc["measurements"] if m["tier"] != "reported"]
    return sorted(speeds, key=str), [q["submitted_by"] for q in doc["quality"]]


def _ranked(site: Site, **params: object) -> list[tuple[str, float | None]]:
    items = site.client.get("/api/v1/recipes", params={"verified": 1, "sort": "decode", **params}).json()
    return [(i["slug"], i["best_verified_decode_tok_s"]) for i in items["items"]]


def _facets(engine: Engine, slug: str) -> tuple[float | None, float | None, int]:
    with engine.connect() as conn:
        r = conn.execute(
            sa.select(
                RECIPES.c.best_decode_tok_s, RECIPES.c.best_verified_decode_tok_s, RECIPES.c.verified_rows
            ).where(RECIPES.c.slug == slug)
        ).one()
    return r[0], r[1], r[2]


def test_a_hidden_users_rows_on_other_peoples_recipes_leave_and_come_back(site: Site, engine: Engine) -> None:
    """Bystander (owned by "other") holds other's verified row at 1,234.5 tok/s and the best one,
    4,321.5 tok/s, by "rig", who also gave it a quality row; the Llama recipe's best verified row is
    2,000 tok/s. Hiding rig removes rig's rows from the page, its JSON, the decode sorts and the
    summary figures (one verified row left); showing rig again brings all of it back."""
    with engine.begin() as conn:
        rig = create_user(conn, "rig")
        add_verified_row(
            conn, OTHER_SLUG, context=2048, decode_tok_s=1234.5, submitted_by=_uid(conn, "other")
        )
        add_verified_row(conn, OTHER_SLUG, context=2048, decode_tok_s=4321.5, submitted_by=rig)
        add_verified_row(conn, SLUG, context=2048, decode_tok_s=2000.0, submitted_by=_uid(conn, "owner"))
        qid = _quality_row(conn, OTHER_SLUG, rig)
    admin, page = _bearer(site, "admin"), f"/recipes/{OTHER_SLUG}"
    shown = ([("other", 1234.5), ("rig", 4321.5)], ["rig"])
    before = [(OTHER_SLUG, 4321.5), (SLUG, 2000.0)]
    assert _rows_of(site, OTHER_SLUG) == shown and _facets(engine, OTHER_SLUG) == (4321.5, 4321.5, 2)
    assert _ranked(site) == before and _ranked(site, context=2048) == before
    html = site.client.get(page).text
    assert "4,321.5 tok/s" in html and f'data-id="{qid}"' in html

    assert site.client.put("/api/v1/users/rig/hidden", headers=admin).status_code == 200
    assert _rows_of(site, OTHER_SLUG) == ([("other", 1234.5)], [])
    assert _facets(engine, OTHER_SLUG) == (1234.5, 1234.5, 1)
    after = [(SLUG, 2000.0), (OTHER_SLUG, 1234.5)]
    assert _ranked(site) == after and _ranked(site, context=2048) == after
    html = site.client.get(page).text
    assert "4,321.5 tok/s" not in html and "1,234.5 tok/s" in html and f'data-id="{qid}"' not in html
    assert site.client.get(f"/recipes/{OTHER_SLUG}.json").json()["quality"] == []

    assert site.client.delete("/api/v1/users/rig/hidden", headers=admin).status_code == 200
    assert _rows_of(site, OTHER_SLUG) == shown and _facets(engine, OTHER_SLUG) == (4321.5, 4321.5, 2)
    assert _ranked(site) == before and _ranked(site, context=2048) == before
    assert "4,321.5 tok/s" in site.client.get(page).text


def _uid(conn: sa.Connection, name: str) -> int:
    return int(conn.execute(sa.select(USERS.c.id).where(USERS.c.name == name)).scalar_one())


def _quality_row(conn: sa.Connection, slug: str, user_id: int) -> int:
    """A verified quality row of ``slug``'s latest revision, as an accepted report leaves one."""
    rec, rev = conn.execute(
        sa.select(RECIPES.c.id, REVISIONS.c.id)
        .join(REVISIONS, REVISIONS.c.recipe_id == RECIPES.c.id)
        .where(RECIPES.c.slug == slug)
    ).one()
    values = {"recipe_id": rec, "revision_id": rev, "submitted_by": user_id, "created_at": now()}
    values |= {"suite": "gsm8k", "metric": "exact_match", "score": 87.5, "n": 40, "repeats": 1}
    values |= {"provenance": "verified", "rig_fingerprint": "e" * 64, "report_id": "ab" * 8}
    qid = int(conn.execute(sa.insert(QUALITY).values(**values).returning(QUALITY.c.id)).scalar_one())
    changed(conn, [rec])  # as the report's write does: the recipe's stored documents rendered again
    return qid
