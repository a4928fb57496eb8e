"""A real ``lair serve`` whose rate limits live in a Redis of the test's own (``redis-server`` on a
free port, nothing saved): while that Redis is down a limited write (a vote) and a sign-in answer 503
with ``Retry-After`` (they cannot be counted, so they are not let through uncounted) and store
nothing, reads go on answering 200, and once the same Redis is started again the writes go through
with no restart of the registry."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lair.registry.db.engine import connect_url, make_engine
from lair.registry.serve import prepare
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.outage import LIMITS_RETRY_S
from lair.testing.registry import free_port, serve_process

pytestmark = [pytest.mark.integration]  # redis-server: scripts/registry-setup.sh installs it

SLUG = "tiny-cpu"


class Redis:
    """``redis-server`` on ``port``, in memory only; :meth:`stop` and :meth:`start` again."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ping = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True)
            if ping.stdout.strip() == "PONG":
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer PING in 20 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[httpx.Client, Redis, str]]:
    redis = Redis(free_port())
    redis.start()
    url, _ = prepare(connect_url(str(tmp_path / "r.sqlite3")))
    engine = make_engine(url)
    with engine.begin() as conn:
        token = create_token(conn, create_user(conn, "voter"))
    engine.dispose()
    env = {"LAIR_REGISTRY_REDIS": f"redis://127.0.0.1:{redis.port}/0"}
    try:
        with (
            serve_process(url, seed=False, env=env, log=tmp_path / "serve.log") as base,
            httpx.Client(base_url=base, timeout=30) as http,
        ):
            yield http, redis, token
    finally:
        redis.stop()


def _vote(http: httpx.Client, token: str) -> httpx.Response:
    return http.put(f"/api/v1/recipes/{SLUG}/vote", headers={"authorization": f"Bearer {token}"})


def test_limited_writes_are_503_while_redis_is_down_and_go_through_once_it_is_back(
    site: tuple[httpx.Client, Redis, str],
) -> None:
    http, redis, token = site
    assert _vote(http, token).json()["votes"] == 1
    assert (
        http.delete(f"/api/v1/recipes/{SLUG}/vote", headers={"authorization": f"Bearer {token}"}).json()[
            "votes"
        ]
        == 0
    )

    redis.stop()
    down = _vote(http, token)
    assert down.status_code == 503, down.text
    assert down.headers["retry-after"] == str(LIMITS_RETRY_S)
    err = down.json()["error"]
    assert (err["code"], err["retry_after"]) == ("unavailable", LIMITS_RETRY_S)
    assert "rate-limit store" in err["message"] and str(redis.port) not in err["message"]
    sign_in = http.post("/api/v1/session", json={"name": "voter", "password": "x" * 12})
    assert sign_in.status_code == 503 and sign_in.headers["retry-after"] == str(LIMITS_RETRY_S)
    read = http.get(f"/api/v1/recipes/{SLUG}.json")
    assert read.status_code == 200 and read.json()["votes"] == 0  # the refused vote stored nothing
    assert http.get("/api/v1/recipes?q=tiny").status_code == 200

    redis.start()
    deadline = time.monotonic() + 30
    back = _vote(http, token)
    while back.status_code == 503 and time.monotonic() < deadline:  # redis-py reconnects on its own
        time.sleep(0.2)
        back = _vote(http, token)
    assert back.status_code == 200 and back.json()["votes"] == 1, back.text
    assert http.get(f"/api/v1/recipes/{SLUG}.json").json()["votes"] == 1
