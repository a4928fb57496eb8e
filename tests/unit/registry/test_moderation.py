"""An admin hides a recipe or a user (API and page actions) on SQLite and PostgreSQL: a hidden user's
recipes leave search, pages, the JSON API, llms.txt and the writes, their sign-in and tokens stop
working, and showing them again brings everything back; the response cache never serves the old."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from registry_paths import LLAMA
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.service.accounts import Actor, create_session, create_token, create_user
from lair.registry.service.publish import publish
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits

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
