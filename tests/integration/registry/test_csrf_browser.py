"""Cross-site form posts in Chromium against a real ``lair serve``: a signed-in admin (who may do
everything) opens pages of another origin that auto-submit a form to every state-changing page route of
the app's route table (the edit form included) and, as ``text/plain`` bodies that parse as JSON, to the
JSON sign-in and fork. Every one is refused with the 403 error page and the database is unchanged.

Two foreign origins: ``http://localhost:PORT`` is another site, so the SameSite=Lax session cookie is
not sent at all; ``http://127.0.0.1:OTHER`` is the same site on another port, so the cookie is sent and
only the server's CSRF check stands in the way. The victim's own vote form still works afterwards.
"""

from __future__ import annotations

import html
import tomllib
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from lair.registry.db.engine import make_engine
from lair.registry.service.accounts import create_user
from lair.registry.web.app import create_app
from lair.testing.folder_server import serve_folder
from lair.testing.registry import db_snapshot, unsafe_routes

pytestmark = pytest.mark.integration

LLAMA = Path(__file__).resolve().parents[3] / "tests" / "data" / "registry" / "llama31-8b.toml"

SLUG = tomllib.loads(LLAMA.read_text())["meta"]["slug"]
PASSWORD = "victim-long-password"
EDITED = LLAMA.read_text().replace("max_context = 32768", "max_context = 1024")
FIELDS = {  # a plausible form for each page route: what the site's own form would post
    "/signup": {"name": "mallory", "password": "mallory-long-password"},
    "/signin": {"name": "victim", "password": PASSWORD},
    "/signout": {},
    "/publish": {"toml": EDITED.replace(SLUG, "planted"), "notes": "planted"},
    "/recipes/{slug}/edit": {"toml": EDITED, "notes": "planted"},
    "/recipes/{slug}/fork": {},
    "/recipes/{slug}/vote": {"vote": "on"},
    "/measurements/{id}/retract": {"reason": "planted", "back": f"/recipes/{SLUG}"},
    "/quality/{id}/retract": {"reason": "planted", "back": f"/recipes/{SLUG}"},
    "/recipes/{slug}/hide": {},
    "/users/{name}/hide": {},
    "/account/tokens": {"name": "planted", "scope": "publish"},
    "/account/tokens/{id}/revoke": {},
}
JSON_AS_TEXT = {  # a text/plain form body that is JSON: {"name": ..., "password": ..., "x": "="}
    "/api/v1/session": ('{"name": "victim", "password": "' + PASSWORD + '", "x": "', '"}'),
    f"/api/v1/recipes/{SLUG}/fork": ('{"x": "', '"}'),
}


def _page_routes(tmp_path: Path) -> list[str]:
    app = create_app(f"sqlite:///{tmp_path / 'routes.sqlite3'}")
    return sorted(p for m, p in unsafe_routes(app) if not p.startswith("/api/"))


def _attack_page(action: str, fields: dict[str, str], enctype: str) -> str:
    """A page that posts a form to ``action`` as soon as it loads (a forged CSRF token in url-encoded
    forms; none in a text/plain one, whose whole body must stay JSON)."""
    if enctype != "text/plain":
        fields = fields | {"csrf": "forged"}
    inputs = "".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in fields.items()
    )
    return (
        f'<!doctype html><form id="f" method="post" action="{html.escape(action)}" enctype="{enctype}">'
        f"{inputs}</form>"
        '<script>document.getElementById("f").submit()</script>'
    )


def _concrete(route: str, mid: int) -> str:
    return route.format(slug=SLUG, id=mid, name="tester")


@pytest.fixture(scope="module")
def victim(served: Any) -> Any:
    engine = make_engine(served.db)
    with engine.begin() as conn:
        create_user(conn, "victim", PASSWORD, admin=True)
    engine.dispose()
    return served


def _attacks(served: Any, routes: list[str], folder: Path) -> list[tuple[str, str, str]]:
    """(file, target URL, enctype) of every attack page, written into ``folder``."""
    engine = make_engine(served.db)
    with engine.connect() as conn:
        mid = int(conn.execute(sa.text("SELECT min(id) FROM measurements")).scalar_one())
    engine.dispose()
    out = []
    for i, route in enumerate(routes):
        assert route in FIELDS, f"add the form fields of {route} to FIELDS"
        target = served.base + _concrete(route, mid)
        (folder / f"form-{i}.html").write_text(
            _attack_page(target, FIELDS[route], "application/x-www-form-urlencoded")
        )
        out.append((f"form-{i}.html", target, "form"))
    for i, (path, (name, value)) in enumerate(JSON_AS_TEXT.items()):
        (folder / f"json-{i}.html").write_text(_attack_page(served.base + path, {name: value}, "text/plain"))
        out.append((f"json-{i}.html", served.base + path, "text/plain"))
    return out


def _sign_in(page: Any, base: str) -> None:
    page.goto(base + "/signin")
    page.fill("#signin input[name=name]", "victim")
    page.fill("#signin input[name=password]", PASSWORD)
    page.click("#signin button[type=submit]")
    page.wait_for_url(base + "/")
    assert page.locator("#me").inner_text() == "victim"


def test_a_cross_site_form_post_is_refused_on_every_route(
    browser: Any, victim: Any, tmp_path: Path, artifacts: Path
) -> None:
    base, ctx = victim.base, browser.new_context()
    page = ctx.new_page()
    _sign_in(page, base)
    folder = tmp_path / "evil"
    folder.mkdir()
    attacks = _attacks(victim, _page_routes(tmp_path), folder)
    assert len(attacks) == len(FIELDS) + len(JSON_AS_TEXT)
    before = db_snapshot(victim.db)
    with serve_folder(folder) as same_site:
        port = same_site.rsplit(":", 1)[1]
        for origin, cookie_sent in ((f"http://localhost:{port}", False), (same_site, True)):
            for name, target, kind in attacks:
                with page.expect_response(lambda r, t=target: r.url == t) as got:
                    page.goto(f"{origin}/{name}")
                resp = got.value
                sent = resp.request.all_headers()
                what = f"{kind} post to {target} from {origin}"
                assert sent["origin"] == origin, what
                assert ("lair_session=" in sent.get("cookie", "")) is cookie_sent, what
                assert resp.status == 403, what
                page.wait_for_url(target)
                if kind == "form":
                    assert page.locator('[data-error="csrf"]').count() == 1, what
                else:
                    assert '"code":"csrf"' in page.content().replace(" ", ""), what
                assert db_snapshot(victim.db) == before, f"{what}: the database changed"
                if cookie_sent and target.endswith("/edit"):
                    page.screenshot(path=str(artifacts / "csrf-refused-edit.png"), full_page=True)
    page.goto(f"{base}/recipes/{SLUG}")  # the victim's own form, from the site itself, still works
    page.click("#vote button")
    page.wait_for_url(f"{base}/recipes/{SLUG}")
    assert page.locator("#votes").inner_text() == "1" and db_snapshot(victim.db) != before
    ctx.close()
