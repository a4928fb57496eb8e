"""The registry on two hosts behind nginx with TLS, as docs/deploy.md sets it up: two network-namespace
nodes (their own addresses on a private bridge) each run ``lair serve --workers 2``; they share one
PostgreSQL, one Redis (rate limits) and one S3 object store (moto's server), all listening on the
bridge; nginx on the host runs ``deploy/nginx/lair-registry.conf`` (its addresses and paths put in)
with a self-signed certificate made by ``openssl req -x509``.

Proven here: pages and JSON over https through nginx from both hosts; the write rate limit is one
limit across the hosts (Redis); one app host SIGKILLed in the middle of a load of votes and uploads:
nginx routes around it and every write acknowledged with a 2xx is in the database (and every
acknowledged upload's objects in the store); the object store killed and restarted: uploads are
503 with Retry-After and leave no row, reads go on, and uploads go through again once it is back."""

from __future__ import annotations

import copy
import os
import re
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from lair.registry.db.engine import make_engine
from lair.registry.serve import prepare
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.outage import OBJECT_STORE_RETRY_S
from lair.registry.service.recompute import check_cells
from lair.testing.deploy import nginx_binary, nginx_conf, redis_server
from lair.testing.nodes import NetnsNodes, TestNode
from lair.testing.postgres import pg_server
from lair.testing.registry import free_port, wait_http
from lair.testing.s3 import S3Server, s3_server
from lair.testing.uploads import encode, report_files, tar_gz

pytestmark = [pytest.mark.integration, pytest.mark.ssh]

ROOT = Path(__file__).resolve().parents[3]
APP_PORT = 8780
BUCKET = "lair-reports"
WRITE_LIMIT = 6  # writes a minute per account, counted in Redis across both hosts


@dataclass
class Deployment:
    nodes: list[TestNode]
    db: str
    s3: S3Server
    base: str  # https://localhost:PORT, through nginx
    tls: ssl.SSLContext
    access_log: Path
    env: dict[str, str]
    logs: Path
    apps: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base, verify=self.tls, headers=headers, timeout=30)

    def start_app(self, node: TestNode) -> None:
        argv = ["nsenter", f"--net={node.netns}", sys.executable, "-m", "lair", "serve", "--db", self.db]
        argv += ["--host", node.address, "--port", str(APP_PORT), "--workers", "2", "--no-seed"]
        argv += ["--blobs", f"s3://{BUCKET}/blobs", "--public-url", self.base]
        log = (self.logs / f"{node.name}.log").open("ab")
        self.apps[node.name] = subprocess.Popen(
            argv, env={**os.environ, **self.env}, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        wait_http(f"http://{node.address}:{APP_PORT}/api/v1/health", 60, self.apps[node.name])

    def kill_app(self, node: TestNode) -> None:
        """SIGKILL every process of that host's lair serve, as a power cut would."""
        proc = self.apps.pop(node.name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def users(self, names: list[str]) -> dict[str, str]:
        engine = make_engine(self.db)
        try:
            with engine.begin() as conn:
                return {n: create_token(conn, create_user(conn, n)) for n in names}
        finally:
            engine.dispose()

    def rows(self, sql: str) -> set[tuple[Any, ...]]:
        engine = make_engine(self.db)
        try:
            with engine.connect() as conn:
                return {tuple(r) for r in conn.execute(sa.text(sql))}
        finally:
            engine.dispose()

    def upstreams(self, since: int = 0) -> list[tuple[str, str, str]]:
        """(request, status, upstream addresses) of each line nginx logged from line ``since`` on."""
        out = []
        for line in self.access_log.read_text().splitlines()[since:]:
            m = re.search(r'"([^"]*)" (\d{3}) ((?:[\d.]+:\d+|-)(?:, [\d.]+:\d+)*) ', line)
            if m:
                out.append((m[1], m[2], m[3]))
        return out

    def upload(self, token: str, n: int) -> httpx.Response:
        with self.client(token) as c:
            body = tar_gz(encode(variant(self.report, n)))
            return c.post("/api/v1/reports", content=body, headers={"content-type": "application/gzip"})


def variant(base: dict[str, Any], n: int) -> dict[str, Any]:
    """The report with its chunks ``n``/2 ms later: another digest, its cell recomputed to match."""
    files = copy.deepcopy(base)
    for row in files["requests.jsonl"]:
        row["chunk_ms"] = [c + 0.5 * n for c in row["chunk_ms"]]
        row["ttft_ms"] = row["chunk_ms"][0]
    (again,), _ = check_cells(files["results.json"]["bench"], files["requests.jsonl"])
    cell = files["results.json"]["bench"]["cells"][0]
    cell.update({k: v for k, v in again.items() if k in cell})
    return files


@pytest.fixture(scope="module")
def nginx() -> str:
    return nginx_binary()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, artifacts: Path, nginx: str) -> Iterator[Deployment]:
    where = tmp_path_factory.mktemp("two-hosts")
    with NetnsNodes(2) as nodes:
        bridge = f"{nodes.subnet}.1"
        with pg_server(host=bridge) as pg, s3_server(host=bridge) as s3:
            redis_proc, redis_url = redis_server(bridge, where)
            proxy: subprocess.Popen[bytes] | None = None
            dep: Deployment | None = None
            try:
                url, added = prepare(pg.url)
                assert "tiny-cpu" in added
                s3.create_bucket(BUCKET)
                https, http = free_port(), free_port()
                conf = nginx_conf(where, [f"{n.address}:{APP_PORT}" for n in nodes.nodes], https, http)
                proxy = subprocess.Popen(
                    [nginx, "-p", str(where), "-c", str(conf), "-g", "daemon off;"],
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
                env = s3.env | {
                    "LAIR_REGISTRY_REDIS": redis_url,
                    "LAIR_REGISTRY_WRITE_LIMIT": f"{WRITE_LIMIT}/minute",
                }
                tls = ssl.create_default_context(cafile=str(where / "registry.crt"))
                base = f"https://localhost:{https}"
                dep = Deployment(nodes.nodes, pg.url, s3, base, tls, where / "access.log", env, artifacts)
                dep.env["LAIR_TEST_HTTP_PORT"] = str(http)
                engine = make_engine(url)
                with engine.connect() as conn:
                    toml, sha = conn.execute(
                        sa.text(
                            "SELECT v.toml, v.sha256 FROM revisions v JOIN recipes r ON r.id = v.recipe_id "
                            "WHERE r.slug = 'tiny-cpu' AND v.number = 1"
                        )
                    ).one()
                engine.dispose()
                dep.report = report_files(toml, sha)
                for node in nodes.nodes:
                    dep.start_app(node)
                yield dep
            finally:
                for name in list(dep.apps if dep else []):
                    dep.kill_app(next(n for n in nodes.nodes if n.name == name))  # type: ignore[union-attr]
                if proxy is not None:
                    proxy.terminate()
                    proxy.wait(15)
                redis_proc.terminate()
                redis_proc.wait(15)


def _answered_by(dep: Deployment, since: int) -> set[str]:
    """The app hosts (addresses) that gave the final answer of each request logged since ``since``."""
    return {ups.split(", ")[-1].rsplit(":", 1)[0] for _req, _status, ups in dep.upstreams(since)}


def test_the_site_serves_over_https_through_nginx_from_both_hosts(deployment: Deployment) -> None:
    dep = deployment
    since = len(dep.upstreams())
    with dep.client() as c:
        for _ in range(8):
            home = c.get("/")
            assert home.status_code == 200 and "tiny-cpu" in home.text
            doc = c.get("/api/v1/recipes/tiny-cpu.json")
            assert doc.status_code == 200 and doc.json()["slug"] == "tiny-cpu"
            assert doc.headers["strict-transport-security"].startswith("max-age=")
    assert _answered_by(dep, since) == {n.address for n in dep.nodes}  # round robin over both
    plain = httpx.get(
        f"http://127.0.0.1:{dep.env['LAIR_TEST_HTTP_PORT']}/recipes/tiny-cpu", headers={"host": "localhost"}
    )
    assert plain.status_code == 301 and plain.headers["location"] == "https://localhost/recipes/tiny-cpu"
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(dep.base + "/", verify=ssl.create_default_context())  # a real TLS handshake, our cert


def test_the_write_limit_is_one_limit_across_both_hosts(deployment: Deployment) -> None:
    dep = deployment
    token = dep.users(["limited"])["limited"]
    since = len(dep.upstreams())
    with dep.client(token) as c:
        statuses = [
            c.request("PUT" if i % 2 == 0 else "DELETE", "/api/v1/recipes/tiny-cpu/vote").status_code
            for i in range(2 * WRITE_LIMIT)
        ]
    assert statuses == [200] * WRITE_LIMIT + [429] * WRITE_LIMIT  # one window in Redis, not one a host
    assert _answered_by(dep, since) == {n.address for n in dep.nodes}


def test_one_app_host_killed_mid_load_loses_no_acknowledged_write(deployment: Deployment) -> None:
    dep = deployment
    victim, survivor = dep.nodes
    slugs = sorted(s for (s,) in dep.rows("SELECT slug FROM recipes"))
    tokens = dep.users([f"voter{i}" for i in range(16)])
    uploader = dep.users(["uploader"])["uploader"]
    votes = [(name, slug) for name in tokens for slug in slugs]
    acked: list[tuple[str, str]] = []
    failed: list[int] = []

    def vote(item: tuple[str, str]) -> None:
        with dep.client(tokens[item[0]]) as c:
            r = c.put(f"/api/v1/recipes/{item[1]}/vote")
        (acked.append(item) if r.is_success else failed.append(r.status_code))

    def upload(n: int) -> str | None:
        r = dep.upload(uploader, n)
        return str(r.json()["id"]) if r.status_code == 201 else None

    third = len(votes) // 3
    with ThreadPoolExecutor(6) as pool:
        uploads = [pool.submit(upload, n) for n in range(1, 4)]
        list(pool.map(vote, votes[:third]))
        before_kill = len(dep.upstreams())
        late = [pool.submit(vote, v) for v in votes[third:]]
        dep.kill_app(victim)  # while the rest of the votes are on their way
        for f in late:
            f.result()
        stored = [f.result() for f in uploads]
    users = dep.rows(
        "SELECT u.name, r.slug FROM votes v JOIN users u ON u.id = v.user_id "
        "JOIN recipes r ON r.id = v.recipe_id"
    )
    assert set(acked) <= users, "an acknowledged vote is not in the database"
    assert len(failed) <= 6, f"more failures than requests in flight at the kill: {failed}"
    assert len(acked) >= len(votes) - 6
    after = dep.upstreams(before_kill + 12)  # once the requests in flight at the kill are past
    assert after and {ups.split(", ")[-1].rsplit(":", 1)[0] for _r, _s, ups in after} == {survivor.address}
    assert all(s.startswith("2") for _r, s, _u in after)
    retried = [ups for _r, s, ups in dep.upstreams(before_kill) if s.startswith("2") and ", " in ups]
    assert any(u.startswith(f"{victim.address}:") for u in retried), "nginx never passed a request on"
    ids = [i for i in stored if i is not None]
    assert ids and set(ids) <= {i for (i,) in dep.rows("SELECT id FROM reports")}
    objects = dep.s3.objects(BUCKET)
    assert all(f"blobs/reports/{i}/results.json" in objects for i in ids)
    dep.start_app(victim)  # back for the next test


def test_a_restart_of_the_object_store_is_survived(deployment: Deployment) -> None:
    dep = deployment
    token = dep.users(["s3-uploader"])["s3-uploader"]
    first = dep.upload(token, 10)
    assert first.status_code == 201, first.text
    rid = first.json()["id"]
    with dep.client() as c:
        kept = c.get(f"/reports/{rid}/files/results.json").content
    reports = dep.rows("SELECT id FROM reports")
    dep.s3.stop()
    try:
        down = dep.upload(token, 11)
        assert down.status_code == 503, down.text
        assert down.headers["retry-after"] == str(OBJECT_STORE_RETRY_S)
        assert down.json()["error"]["message"] == "the registry's object store is unavailable"
        assert dep.rows("SELECT id FROM reports") == reports  # no row without its blobs
        with dep.client() as c:
            assert c.get("/api/v1/recipes/tiny-cpu.json").status_code == 200  # reads go on
    finally:
        dep.s3.start()
    again = dep.upload(token, 11)
    assert again.status_code == 201, again.text
    with dep.client() as c:
        assert c.get(f"/reports/{rid}/files/results.json").content == kept  # kept across the restart
        assert c.get(f"/reports/{again.json()['id']}/files/results.json").status_code == 200
