"""An attacker with a free account and the registry's URL, against a real ``lair serve`` (SQLite):
a corpus of hostile requests beyond the named cases (odd paths, budgets on every parameter, headers,
bodies, forms, tokens), each answered with a 4xx (never a 5xx, never a hang), then a slow-drip
upload and many idle connections held open while ``/api/v1/health`` keeps its latency. The server's
own log must show no traceback afterwards, and the site still serves."""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lair.registry.serve import prepare
from lair.testing.registry import serve_process

pytestmark = pytest.mark.integration

Attack = tuple[str, str, dict[str, str], bytes]
DROPPED = 0
"""The status :func:`_send` gives a request whose connection the server dropped without an answer."""


def _json(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _recipe(**extra: str) -> bytes:
    body = 'engine = "vllm"\nmodel = "org/m"\n[meta]\ntitle = "Attack"\n' + "".join(extra.values())
    return _json({"toml": body})


def _corpus(token: str, base: str) -> dict[str, Attack]:
    auth = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    return {
        "traversal in a report file": ("GET", "/reports/abc/files/..%2f..%2f..%2fetc%2fpasswd", {}, b""),
        "encoded traversal in a slug": ("GET", "/api/v1/recipes/..%2f..%2fetc%2fpasswd.json", {}, b""),
        "a NUL in a slug": ("GET", "/recipes/tiny%00-cpu", {}, b""),
        "a 10,000-character slug": ("GET", "/api/v1/recipes/" + "a" * 10_000 + ".json", {}, b""),
        "a limit of a billion": ("GET", "/api/v1/recipes?limit=1000000000", {}, b""),
        "a negative limit": ("GET", "/api/v1/recipes?limit=-5", {}, b""),
        "a limit of 1e308": ("GET", "/api/v1/recipes?limit=1e308", {}, b""),
        "an unknown sort": ("GET", "/api/v1/recipes?sort=__class__", {}, b""),
        "FTS syntax in the search": ("GET", "/api/v1/recipes?q=%22%20OR%20NEAR(a%20b)%20*%5E-", {}, b""),
        "SQL in the search": ("GET", "/api/v1/recipes?q=%27%3B%20DROP%20TABLE%20recipes%3B--", {}, b""),
        "a 20,000-character search": ("GET", "/api/v1/recipes?q=" + "x" * 20_000, {}, b""),
        "garbage cursor": ("GET", "/api/v1/recipes?cursor=%FF%FE%00%01", {}, b""),
        "a revision of 1e308": ("GET", "/api/v1/recipes/tiny-cpu/revisions/1e308", {}, b""),
        "a revision of -1": ("GET", "/api/v1/recipes/tiny-cpu/revisions/-1", {}, b""),
        "compare with a huge revision": (
            "GET",
            "/recipes/tiny-cpu/compare?a=1&b=99999999999999999999999",
            {},
            b"",
        ),
        "fit for a billion GPUs": ("GET", "/api/v1/recipes/tiny-cpu/fit?gpu=H100&gpus=1000000000", {}, b""),
        "fit for an unknown GPU with markup": (
            "GET",
            "/recipes/tiny-cpu/fit?gpu=%3Cscript%3E&gpus=1",
            {},
            b"",
        ),
        "fit with a context of 1e308": (
            "GET",
            "/api/v1/recipes/tiny-cpu/fit?gpu=H100&gpus=1&context=1e308",
            {},
            b"",
        ),
        "TRACE": ("TRACE", "/", {}, b""),
        "a 60 KB cookie": ("GET", "/", {"cookie": "lair_session=" + "a" * 60_000}, b""),
        "a 10,000-character bearer token": (
            "GET",
            "/api/v1/me",
            {"authorization": "Bearer " + "t" * 10_000},
            b"",
        ),
        "a basic auth header": ("GET", "/api/v1/me", {"authorization": "Basic YWRtaW46YWRtaW4="}, b""),
        "a bearer token with a NUL": ("GET", "/api/v1/me", {"authorization": "Bearer abc\x01def"}, b""),
        "a forwarded-for of 5,000 hops": (
            "POST",
            "/api/v1/session",
            {
                "x-forwarded-for": ", ".join(f"10.0.{i % 250}.{i % 200}" for i in range(5_000)),
                "content-type": "application/json",
            },
            _json({"name": "nobody", "password": "wrong-password"}),
        ),
        "a JSON body nested 100,000 deep": ("POST", "/api/v1/recipes", auth, b"[" * 100_000),
        "a 2 MB JSON body": ("POST", "/api/v1/recipes", auth, _json({"toml": "x" * (2 << 20)})),
        "a JSON array body": ("POST", "/api/v1/recipes", auth, b"[1, 2, 3]"),
        "a toml field that is a number": ("POST", "/api/v1/recipes", auth, _json({"toml": 1e308})),
        "a recipe with 50,000 args": (
            "POST",
            "/api/v1/recipes",
            auth,
            _recipe(a="args = [" + ", ".join(['"--x"'] * 50_000) + "]\n"),
        ),
        "a recipe with 20,000 env entries": (
            "POST",
            "/api/v1/recipes",
            auth,
            _recipe(a="[env]\n" + "".join(f'E{i} = "v"\n' for i in range(20_000))),
        ),
        "a recipe that is not TOML": ("POST", "/api/v1/recipes", auth, _json({"toml": "engine = = ="})),
        "a user name with a NUL": (
            "POST",
            "/api/v1/users",
            {"content-type": "application/json"},
            _json({"name": "adm\u0000in", "password": "a-long-password-1"}),
        ),
        "a 10,000-character user name": (
            "POST",
            "/api/v1/users",
            {"content-type": "application/json"},
            _json({"name": "a" * 10_000, "password": "a-long-password-1"}),
        ),
        "a right-to-left override in a user name": (
            "POST",
            "/api/v1/users",
            {"content-type": "application/json"},
            _json({"name": "adm\u202enimda", "password": "a-long-password-1"}),
        ),
        "a password of a megabyte": (
            "POST",
            "/api/v1/session",
            {"content-type": "application/json"},
            _json({"name": "alice", "password": "p" * (1 << 20)}),
        ),
        "a sign-in form of 5,000 fields": (
            "POST",
            "/signin",
            {"content-type": "application/x-www-form-urlencoded", "origin": "http://evil.example"},
            "&".join(f"f{i}=v" for i in range(5_000)).encode(),
        ),
        "a same-origin sign-in form of 5,000 fields": (
            "POST",
            "/signin",
            {"content-type": "application/x-www-form-urlencoded", "origin": base},
            "&".join(f"f{i}=v" for i in range(5_000)).encode(),
        ),
        "a same-origin sign-in form of one 2 MB field": (
            "POST",
            "/signin",
            {"content-type": "application/x-www-form-urlencoded", "origin": base},
            b"name=alice&password=" + b"p" * (2 << 20),
        ),
        "a vote on a recipe that does not exist": ("PUT", "/api/v1/recipes/no-such-recipe/vote", auth, b""),
        "a retraction of measurement 1e308": (
            "POST",
            "/api/v1/measurements/1e308/retract",
            auth,
            _json({"reason": "x"}),
        ),
        "a retraction of measurement -1": (
            "POST",
            "/api/v1/measurements/-1/retract",
            auth,
            _json({"reason": "x"}),
        ),
        "a token revoke of a huge id": ("DELETE", "/api/v1/tokens/99999999999999999999999999", auth, b""),
        "a report upload that is JSON": ("POST", "/api/v1/reports", auth, _json({"results": {}})),
        "a report upload of random bytes": (
            "POST",
            "/api/v1/reports",
            {**auth, "content-type": "application/gzip"},
            bytes(range(256)) * 64,
        ),
        "a diff against revision 1e308": ("GET", "/api/v1/recipes/tiny-cpu/diff?a=1&b=1e308", {}, b""),
    }


def _user_add(db: str, name: str) -> str:
    argv = [sys.executable, "-m", "lair", "registry", "user", "add", name, "--db", db, "--json"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)["token"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    root = tmp_path_factory.mktemp("attacks")
    db = f"sqlite:///{root / 'registry.sqlite3'}"
    prepare(db, seed=True)
    token = _user_add(db, "attacker")
    log = root / "serve.log"
    env = {"LAIR_REGISTRY_WRITE_LIMIT": "100000/minute"}  # the limits are not under test here
    with serve_process(db, seed=False, log=log, env=env) as base:
        yield base, token, log


def _send(base: str, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, float]:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    t0 = time.monotonic()
    try:
        conn.request(method, path, body=body or None, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status, time.monotonic() - t0
    except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
        return DROPPED, time.monotonic() - t0  # no answer at all: a failure, as a 5xx is
    finally:
        conn.close()


def test_every_hostile_request_gets_a_4xx_quickly(server: tuple[str, str, Path]) -> None:
    base, token, log = server
    answers = {name: _send(base, *attack) for name, attack in _corpus(token, base).items()}
    bad = {n: a for n, a in answers.items() if not 400 <= a[0] < 500 and a[0] not in (200, 201)}
    assert bad == {}, bad
    slow = {n: round(a[1], 2) for n, a in answers.items() if a[1] > 5.0}
    assert slow == {}, slow
    expected = {
        "traversal in a report file": 404,
        "a limit of a billion": 422,
        "a limit of 1e308": 422,
        "garbage cursor": 422,
        "fit for a billion GPUs": 422,
        "a JSON body nested 100,000 deep": 422,
        "a 2 MB JSON body": 413,
        "a recipe with 50,000 args": 413,
        "a user name with a NUL": 422,
        "a right-to-left override in a user name": 422,
        "a password of a megabyte": 413,
        "TRACE": 405,
        "a bearer token with a NUL": 400,
    }
    assert {n: answers[n][0] for n in expected} == expected
    assert _send(base, "GET", "/api/v1/health", {}, b"")[0] == 200
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]


def _health_latencies(base: str, stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        status, took = _send(base, "GET", "/api/v1/health", {}, b"")
        assert status == 200
        out.append(took)


def test_a_slow_drip_upload_and_idle_connections_do_not_stall_the_server(
    server: tuple[str, str, Path],
) -> None:
    """A body dripped a few bytes at a time for 3 s and 64 connections that send half a request and
    wait: /health answers all the while within 50 ms at the 99th percentile."""
    base, token, _ = server
    host, port = base.removeprefix("http://").split(":")
    idle = []
    for _ in range(64):
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n")  # never finished
        idle.append(s)
    drip = socket.create_connection((host, int(port)), timeout=10)
    drip.sendall(
        b"POST /api/v1/reports HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/gzip\r\n"
        + f"Authorization: Bearer {token}\r\nContent-Length: 1000000\r\n\r\n".encode()
    )
    stop, latencies = threading.Event(), []
    poller = threading.Thread(target=_health_latencies, args=(base, stop, latencies))
    poller.start()
    try:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            drip.sendall(b"\x1f\x8b\x08\x00")
            time.sleep(0.05)  # the attacker's pace: the thing under test is the server meanwhile
    finally:
        stop.set()
        poller.join(30)
        for s in [*idle, drip]:
            s.close()
    assert len(latencies) >= 20
    p99 = statistics.quantiles(latencies, n=100)[98]
    assert p99 < 0.050, f"/health p99 {p99 * 1000:.1f} ms over {len(latencies)} requests"
