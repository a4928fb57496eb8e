"""No route does its database work on the event loop (SQLite and PostgreSQL): every connection the
app's engine hands out while the pages, fallbacks, forms and API writes below are answered is checked
out on a worker thread, never on the thread running the loop, so a slow statement, a render or argon2
never holds up the requests served meanwhile. Each URL is asked once, so no cached answer hides a
route. Lists and searches stay on the loop, measured (``routes``' docstring), and are not asked
here; the stored documents are read in the ASGI front on purpose, before any route (the recipe pages
below are read signed in, which the front passes to the route)."""

from __future__ import annotations

import asyncio
import re
import traceback
from collections.abc import Iterator

import pytest
from registry_paths import LLAMA
from sqlalchemy import Engine, event
from starlette.testclient import TestClient

from lair.registry.service.accounts import create_user
from lair.registry.service.publish import seed_examples
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits

SLUG = "tiny-cpu"


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@pytest.fixture
def site(db_url: str, engine: Engine) -> Iterator[tuple[TestClient, list[str]]]:
    reset_limits()
    with engine.begin() as conn:
        seed_examples(conn)
        create_user(conn, "alice", "correct horse battery")
    app = create_app(db_url)
    on_loop: list[str] = []

    def checkout(*_: object) -> None:
        if _on_loop():
            on_loop.append("".join(traceback.format_stack(limit=12)))

    with TestClient(app) as client:
        event.listen(app.app.state.engine, "checkout", checkout)
        yield client, on_loop


def test_pages_searches_forms_and_writes_check_out_no_connection_on_the_loop(
    site: tuple[TestClient, list[str]],
) -> None:
    client, on_loop = site
    signed = client.post(
        "/signin", data={"name": "alice", "password": "correct horse battery"}, follow_redirects=False
    )
    assert signed.status_code == 303 and signed.headers["location"] == "/"  # not followed: "/" is a list
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get(f"/recipes/{SLUG}").text)
    assert csrf is not None
    reads = [
        f"/recipes/{SLUG}", f"/recipes/{SLUG}/revisions/1",
        f"/api/v1/recipes/{SLUG}/revisions/1.json", f"/recipes/{SLUG}/fit",
        f"/recipes/{SLUG}/fit.json?gpu=H100", f"/recipes/{SLUG}/cost", f"/recipes/{SLUG}/cost.json",
        f"/recipes/{SLUG}/placeholders",
        f"/recipes/{SLUG}/compare", f"/recipes/{SLUG}/edit", f"/api/v1/recipes/{SLUG}/diff?from=1&to=1",
        "/publish", "/account", "/api/v1/me", "/api/v1/tokens", "/llms.txt",
    ]  # fmt: skip
    for url in reads:
        assert client.get(url).status_code == 200, url
    for url in ("/reports/none", "/api/v1/reports/none", "/reports/none/files/results.json"):
        assert client.get(url).status_code == 404, url  # looked up, not there
    form = {"csrf": csrf.group(1)}
    assert client.post(f"/recipes/{SLUG}/vote", data=form, follow_redirects=False).status_code == 303
    assert client.post(f"/recipes/{SLUG}/fork", data=form, follow_redirects=False).status_code == 303
    assert (
        client.post(
            "/account/tokens", data=form | {"name": "ci", "scope": "publish"}, follow_redirects=False
        ).status_code
        == 200
    )
    assert client.post("/publish", data=form | {"toml": LLAMA.read_text()}).status_code == 200
    assert client.post("/signout", data=form, follow_redirects=False).status_code == 303
    assert on_loop == [], f"{len(on_loop)} connections checked out on the event loop:\n{on_loop[0]}"
