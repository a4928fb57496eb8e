"""A real ``lair serve`` behind the shipped nginx (``deploy/nginx/lair-registry.conf``, TLS), its rate
limits in a real Redis that wants a password and speaks only TLS, as deploy/systemd/registry.env.example
sets it up. Clients come from addresses of their own (127.0.0.2, 127.0.0.3: the loopback range is
all this machine's), so nginx sees them apart, as it sees clients on the internet.

Proven here: 30 bad sign-ins from one client lock out that client only (the app counts the address
nginx forwards, from the trusted proxy only), a client's own ``X-Forwarded-For`` does not move it to
another count, a 200 KiB user name is refused (422, field ``name``) before it is any rate-limit key in
Redis, and a write flood from one address is answered 429 by nginx itself."""

from __future__ import annotations

import ssl
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from lair.registry.db.engine import make_engine
from lair.registry.serve import prepare
from lair.registry.service.accounts import create_user
from lair.testing.deploy import nginx_binary, nginx_conf, redis_server
from lair.testing.registry import free_port, serve_process, wait_http

pytestmark = [pytest.mark.integration]

PASSWORD = "a-good-long-password"


@dataclass
class Site:
    base: str
    ca: Path
    redis_url: str

    def client(self, source: str) -> httpx.Client:
        """A client whose connections come from ``source`` (an address of this machine)."""
        tls = ssl.create_default_context(cafile=str(self.ca))
        transport = httpx.HTTPTransport(local_address=source, verify=tls)
        return httpx.Client(base_url=self.base, transport=transport, timeout=30)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    where = tmp_path_factory.mktemp("proxy")
    (where / "redis").mkdir()
    db = f"sqlite:///{where / 'registry.sqlite3'}"
    url, _ = prepare(db)
    engine = make_engine(url)
    with engine.begin() as conn:
        create_user(conn, "victim", PASSWORD)
    engine.dispose()
    redis_proc, redis_url = redis_server("127.0.0.1", where / "redis", password="redis-secret", tls=True)
    app_port, https, http = free_port(), free_port(), free_port()
    conf = nginx_conf(where, [f"127.0.0.1:{app_port}"], https, http)
    proxy = subprocess.Popen(
        [nginx_binary(), "-p", str(where), "-c", str(conf), "-g", "daemon off;"],
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    env = {"LAIR_REGISTRY_REDIS": redis_url}
    try:
        with serve_process(
            db, port=app_port, seed=False, args=["--forwarded-allow-ips", "127.0.0.1"], env=env,
            log=where / "serve.log",
        ):  # fmt: skip
            s = Site(f"https://localhost:{https}", where / "registry.crt", redis_url)
            wait_http(f"http://127.0.0.1:{app_port}/api/v1/health", 30)
            yield s
    finally:
        proxy.terminate()
        proxy.wait(15)
        redis_proc.terminate()
        redis_proc.wait(15)


def _sign_in(c: httpx.Client, name: str, password: str, **headers: str) -> int:
    return c.post("/api/v1/session", json={"name": name, "password": password}, headers=headers).status_code


def test_bad_sign_ins_lock_out_their_client_only(site: Site) -> None:
    with site.client("127.0.0.2") as attacker, site.client("127.0.0.3") as victim:
        statuses = [_sign_in(attacker, "victim", f"wrong-{i}") for i in range(12)]
        # 10 a minute per (address, name): the 11th is refused, nothing else got a chance to count
        assert statuses == [401] * 10 + [429] * 2
        # its own X-Forwarded-For goes in front of nginx's: the app takes the rightmost untrusted one
        assert _sign_in(attacker, "victim", "wrong", **{"X-Forwarded-For": "127.0.0.9"}) == 429
        assert _sign_in(attacker, "victim", PASSWORD) == 429
        assert _sign_in(victim, "victim", PASSWORD) == 200  # another client: a count of its own


def test_a_huge_user_name_is_refused_before_it_is_a_key(site: Site) -> None:
    r_keys = redis.Redis.from_url(site.redis_url)
    before = set(r_keys.keys("*"))
    with site.client("127.0.0.4") as c:
        r = c.post("/api/v1/session", json={"name": "a" * 200_000, "password": "x" * 12})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["ok"] is False and [e["path"] for e in body["error"]["errors"]] == ["name"], body
    after = set(r_keys.keys("*"))
    assert after == before  # not counted: no key, no window
    assert max((len(k) for k in after), default=0) < 300


def test_a_write_flood_from_one_address_is_refused_by_nginx(site: Site) -> None:
    """600 writes as fast as 8 connections send them: past the burst of 200 (and 20 a second after
    it) nginx answers 429 itself; another address is not affected."""

    def post(c: httpx.Client) -> tuple[int, str]:
        r = c.post("/api/v1/session", json={"name": "Not-A-Name", "password": "x"})
        return r.status_code, r.text

    with site.client("127.0.0.5") as flood, ThreadPoolExecutor(8) as pool:
        t0 = time.monotonic()
        got = list(pool.map(lambda _i: post(flood), range(600)))
        took = time.monotonic() - t0
    refused = [text for status, text in got if status == 429]
    answered = [status for status, _ in got if status != 429]
    assert set(answered) == {422}, set(answered)  # what the app says of the name, when it got there
    assert len(answered) <= 200 + 20 * took + 8, (len(answered), took)
    assert refused and all("nginx" in t for t in refused)  # nginx's own page: the app never saw them
    with site.client("127.0.0.6") as other:
        assert post(other)[0] == 422
