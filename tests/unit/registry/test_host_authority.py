"""The ``Host`` header is checked as an authority, ``host[:port]`` or ``[IPv6][:port]`` and nothing
more: ``127.0.0.1:18080@evil.example`` passed the check as 127.0.0.1 and every absolute link of the
page then pointed at evil.example (its userinfo form); now it, a path, a second port or a port over
65535 get 400 ``bad_host`` and no link anywhere names the other host."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.web.app import create_app
from lair.registry.web.hosts import authority_host

LOOPBACK = ["localhost,127.0.0.1,::1"]
HOSTILE = (
    "127.0.0.1:18080@evil.example",
    "user:pw@127.0.0.1:18080",
    "127.0.0.1:18080/evil.example",
    "127.0.0.1:18080:1",
    "127.0.0.1:99999",
    "127.0.0.1 evil.example",
    "[::1]@evil.example",
    "[::1]:8080/x",
)


@pytest.mark.parametrize("host", HOSTILE)
def test_a_host_header_that_is_more_than_an_authority_gets_400(db_url: str, host: str) -> None:
    with TestClient(create_app(db_url, allowed_hosts=LOOPBACK), raise_server_exceptions=False) as c:
        for path in ("/", "/api/v1/openapi.json", "/llms.txt"):
            r = c.get(path, headers={"host": host})
            assert r.status_code == 400 and "evil.example" not in r.text, (path, r.text)
        assert c.get("/api/v1/recipes", headers={"host": host}).json()["error"]["code"] == "bad_host"


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("127.0.0.1:18080", "http://127.0.0.1:18080"),
        ("[::1]:8080", "http://[::1]:8080"),
        ("LOCALHOST", "http://LOCALHOST"),
    ],
)
def test_an_allowed_authority_is_the_links_origin(
    engine: Engine, db_url: str, host: str, origin: str
) -> None:
    with TestClient(create_app(db_url, allowed_hosts=LOOPBACK), raise_server_exceptions=False) as c:
        servers = c.get("/api/v1/openapi.json", headers={"host": host}).json()["servers"]
        assert servers == [{"url": origin}]


def test_the_authority_parse() -> None:
    assert [authority_host(h) for h in HOSTILE] == [None] * len(HOSTILE)
    assert authority_host("Registry.Example:443") == "registry.example"
    assert authority_host("[2001:db8::1]:8780") == "2001:db8::1"
