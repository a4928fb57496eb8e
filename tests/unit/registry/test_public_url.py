"""The Host header never becomes a link on its own word: without a public URL or allowed hosts the
list and recipe documents, llms.txt and the OpenAPI ``servers`` carry relative URLs whatever Host is
sent; with a public URL every absolute URL starts with it; with allowed hosts a listed name is used.
A request for a name outside a public URL / allowed hosts gets 400 ``bad_host`` (JSON on the API,
HTML for a page, the name not echoed), with or without the response cache; ``/api/v1/health``
answers every name. ``lair serve`` allows the loopback names when bound to a loopback address."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator

import pytest
from registry_paths import LLAMA
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.serve import host_names
from lair.registry.service.publish import publish
from lair.registry.web.app import create_app
from lair.registry.web.hosts import host_allowed

SLUG = tomllib.loads(LLAMA.read_text())["meta"]["slug"]
EVIL = "evil.example"
PAGES = ("/api/v1/recipes", f"/api/v1/recipes/{SLUG}.json", "/llms.txt", "/api/v1/openapi.json", "/")


@pytest.fixture
def db(engine: Engine, db_url: str) -> Iterator[str]:
    with engine.begin() as conn:
        publish(conn, LLAMA.read_text(), owner="owner")
    yield db_url


def _texts(c: TestClient, host: str) -> dict[str, str]:
    out = {}
    for path in PAGES:
        r = c.get(path, headers={"host": host})
        assert r.status_code == 200, (path, r.text)
        out[path] = r.text
    return out


def test_without_a_public_url_the_host_header_is_never_a_link(db: str) -> None:
    with TestClient(create_app(db), raise_server_exceptions=False) as c:
        texts = _texts(c, EVIL)
        assert not any(EVIL in t for t in texts.values()), [p for p, t in texts.items() if EVIL in t]
        doc = c.get(f"/api/v1/recipes/{SLUG}.json", headers={"host": EVIL}).json()
        assert doc["links"]["page"] == f"/recipes/{SLUG}"
        items = c.get("/api/v1/recipes", headers={"host": EVIL}).json()["items"]
        assert items and all(i["url"].startswith("/recipes/") for i in items)
        assert c.get("/api/v1/openapi.json", headers={"host": EVIL}).json()["servers"] == [{"url": "/"}]
        assert f"(/api/v1/recipes/{SLUG}.json)" in texts["/llms.txt"]


@pytest.mark.parametrize("cache_bytes", [None, 0])
def test_with_a_public_url_links_use_it_and_other_hosts_get_400(db: str, cache_bytes: int | None) -> None:
    public = "https://recipes.example"
    app = create_app(db, public_url=public, cache_bytes=cache_bytes)
    with TestClient(app, "https://recipes.example", raise_server_exceptions=False) as c:
        texts = _texts(c, "recipes.example")
        assert c.get("/api/v1/openapi.json").json()["servers"] == [{"url": public}]
        assert f"({public}/api/v1/recipes/{SLUG}.json)" in texts["/llms.txt"]
        assert c.get(f"/api/v1/recipes/{SLUG}.json").json()["links"]["page"] == f"{public}/recipes/{SLUG}"
        for path in PAGES:
            r = c.get(path, headers={"host": EVIL})
            assert r.status_code == 400 and EVIL not in r.text, (path, r.text)
        api = c.get("/api/v1/recipes", headers={"host": f"{EVIL}:443"})
        assert api.json()["error"]["code"] == "bad_host"
        page = c.get("/", headers={"host": EVIL})
        assert page.headers["content-type"].startswith("text/html") and 'data-error="bad_host"' in page.text
        write = c.post("/api/v1/users", json={"name": "x", "password": "p" * 12}, headers={"host": EVIL})
        assert write.status_code == 400
        assert c.get("/api/v1/health", headers={"host": "10.1.2.3:8780"}).status_code == 200  # a probe
        assert c.get("/", headers={"host": "RECIPES.example:443"}).status_code == 200  # case, port


def test_with_allowed_hosts_a_listed_name_is_used_and_others_get_400(db: str) -> None:
    app = create_app(db, allowed_hosts=["registry.internal,*.lab.example"])
    with TestClient(app, "http://registry.internal", raise_server_exceptions=False) as c:
        doc = c.get(f"/api/v1/recipes/{SLUG}.json").json()
        assert doc["links"]["page"] == f"http://registry.internal/recipes/{SLUG}"
        sub = c.get("/api/v1/openapi.json", headers={"host": "node1.lab.example:8780"}).json()
        assert sub["servers"] == [{"url": "http://node1.lab.example:8780"}]
        for host in (EVIL, "lab.example.evil", "registry.internal.evil", ""):
            r = c.get("/api/v1/openapi.json", headers={"host": host})
            assert r.status_code == 400, host


def test_the_allowed_hosts_come_from_the_environment_too(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAIR_REGISTRY_ALLOWED_HOSTS", "a.example, b.example")
    with TestClient(create_app(db), "http://b.example", raise_server_exceptions=False) as c:
        assert c.get("/llms.txt").text.count("http://b.example/api/v1/recipes") >= 1
        assert c.get("/llms.txt", headers={"host": EVIL}).status_code == 400


def test_lair_serve_allows_the_loopback_names_when_bound_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAIR_REGISTRY_ALLOWED_HOSTS", raising=False)
    assert host_names("127.0.0.1", []) == ["localhost", "127.0.0.1", "::1"]
    assert host_names("::1", ["r.example"]) == ["r.example", "localhost", "127.0.0.1", "::1"]
    assert host_names("0.0.0.0", []) == []  # no names known: every name, relative links
    assert host_names("10.0.0.5", ["r.example,s.example"]) == ["r.example", "s.example"]
    loop = frozenset(host_names("127.0.0.1", []))
    assert all(host_allowed(h, loop) for h in ("localhost:8780", "127.0.0.1:8780", "[::1]:8780"))
    assert not host_allowed("attacker.example:8780", loop)  # DNS rebinding onto 127.0.0.1
