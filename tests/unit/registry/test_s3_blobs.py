"""The S3 blob store beyond the shared contract (``test_blobs.py``): its URL and settings, its outages
over real HTTP (moto's server killed and started again, a server that answers 503 SlowDown, a port
nobody listens on) as 503 ``unavailable`` with ``Retry-After``, and a real report uploaded through
the API while the object store is down: 503, no row in any table, no object, then accepted once the
store is back, its objects byte for byte the report's files."""

from __future__ import annotations

import http.server
import io
import tarfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from upload_site import Site, make_site

from lair.errors import RegistryError
from lair.registry.service.blobs import S3BlobStore, S3Settings, blob_store, s3_settings
from lair.registry.service.outage import OBJECT_STORE_RETRY_S, Unavailable
from lair.testing.registry import db_snapshot, free_port
from lair.testing.s3 import S3Server
from lair.testing.uploads import encode, tar_gz


def test_the_url_names_bucket_and_prefix_and_the_environment_the_endpoint() -> None:
    env = {"LAIR_REGISTRY_S3_ENDPOINT": "http://10.0.0.5:9000", "AWS_REGION": "eu-west-3"}
    got = s3_settings("s3://reports/lair/blobs", env)
    assert got == S3Settings("reports", "lair/blobs", "http://10.0.0.5:9000", "eu-west-3")
    q = s3_settings("s3://b?endpoint=https://minio.internal&region=x", {"LAIR_REGISTRY_S3_REGION": "y"})
    assert (q.bucket, q.prefix, q.endpoint, q.region) == ("b", "", "https://minio.internal", "x")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3://AKIA:hunter2@bucket/p", "must not carry credentials"),
        ("s3:///prefix", "no bucket"),
        ("s3://b/p?endpont=http://x", "unknown parameter 'endpont'"),
        ("s3://b/../etc", "is no key path"),
    ],
)
def test_bad_urls_are_422_with_what_is_wrong(url: str, message: str) -> None:
    with pytest.raises(RegistryError) as exc:
        blob_store(url)
    assert exc.value.status == 422 and message in exc.value.message
    assert "hunter2" not in exc.value.message


def _unavailable(exc: pytest.ExceptionInfo[Unavailable]) -> None:
    e = exc.value
    assert (e.status, e.code, e.retry_after) == (503, "unavailable", OBJECT_STORE_RETRY_S)
    assert e.message == "the registry's object store is unavailable"


def test_a_killed_store_is_503_on_every_call_and_serves_again_after_its_restart(
    s3: S3Server, s3_url: str
) -> None:
    store = blob_store(s3_url)
    store.put("reports/r1/results.json", b'{"a": 1}')
    s3.stop()
    try:
        for call in (
            lambda: store.put("reports/r2/results.json", b"{}"),
            lambda: store.get("reports/r1/results.json"),
            lambda: store.delete_prefix("reports/r1"),
        ):
            with pytest.raises(Unavailable) as exc:
                call()
            _unavailable(exc)
    finally:
        s3.start()
    assert store.get("reports/r1/results.json") == b'{"a": 1}'  # kept across the restart
    with pytest.raises(RegistryError) as missing:
        store.get("reports/r2/results.json")  # the put during the outage left nothing
    assert missing.value.status == 404
    store.put("reports/r2/results.json", b"{}")
    assert store.get("reports/r2/results.json") == b"{}"


def _keys(client: Any, bucket: str, prefix: str) -> list[str]:
    """Every key under ``prefix``, listed by boto3's own paginator (pages of 1,000)."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def test_deleting_a_report_of_more_than_1000_objects_deletes_them_all(s3: S3Server, s3_url: str) -> None:
    """S3 lists 1,000 keys a page: a report of 1,234 objects (three pages) is gone whole, and the
    report beside it, whose id the first one's is a prefix of, is untouched."""
    bucket = s3_url.removeprefix("s3://").split("/")[0]
    client: Any = s3.client()
    names = [f"blobs/reports/r1/logs/{i:04d}.log" for i in range(1234)]
    with ThreadPoolExecutor(8) as pool:  # one batch of puts, behind the store's back
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=b"x"), names))
    store = blob_store(s3_url)
    store.put("reports/r10/results.json", b"{}")
    assert _keys(client, bucket, "blobs/reports/r1/") == names
    store.delete_prefix("reports/r1")
    assert _keys(client, bucket, "blobs/reports/r1/") == []
    assert _keys(client, bucket, "blobs/") == ["blobs/reports/r10/results.json"]


class _SlowDown(http.server.BaseHTTPRequestHandler):
    """An S3 endpoint that is overloaded: every request gets 503 SlowDown (counted)."""

    seen = 0
    body = b'<?xml version="1.0"?><Error><Code>SlowDown</Code><Message>slow down</Message></Error>'

    def _answer(self) -> None:
        type(self).seen += 1
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(503)
        self.send_header("content-type", "application/xml")
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_down() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowDown)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")


@pytest.mark.usefixtures("keys")
def test_a_store_answering_503_slowdown_is_503_after_the_clients_retries(slow_down: str) -> None:
    store = S3BlobStore(S3Settings("b", endpoint=slow_down, region="us-east-1"))
    _SlowDown.seen = 0
    with pytest.raises(Unavailable) as exc:
        store.put("reports/r/results.json", b"{}")
    _unavailable(exc)
    assert _SlowDown.seen == store.settings.attempts  # retried, then given up


@pytest.mark.usefixtures("keys")
def test_nobody_listening_is_503() -> None:
    store = S3BlobStore(S3Settings("b", endpoint=f"http://127.0.0.1:{free_port()}", region="us-east-1"))
    with pytest.raises(Unavailable) as exc:
        store.get("reports/r/results.json")
    _unavailable(exc)


def test_check_tells_a_missing_bucket(s3: S3Server, s3_url: str) -> None:
    blob_store(s3_url).check()  # type: ignore[attr-defined]
    with pytest.raises(RegistryError) as exc:
        blob_store("s3://no-such-bucket-here").check()  # type: ignore[attr-defined]
    assert exc.value.status == 422 and "answered 404" in exc.value.message


def test_check_tells_missing_credentials(s3: S3Server, s3_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(RegistryError) as exc:
        blob_store(s3_url).check()  # type: ignore[attr-defined]
    assert exc.value.status == 422 and "no credentials" in exc.value.message
    assert "AWS_SHARED_CREDENTIALS_FILE" in (exc.value.hint or "")


def test_lair_serve_refuses_a_bucket_that_is_not_there(
    s3: S3Server, s3_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lair.cli import main

    rc = main(["serve", "--db", str(tmp_path / "r.sqlite3"), "--blobs", "s3://not-made-yet", "--no-seed"])
    err = capsys.readouterr().err
    assert rc != 0 and "s3://not-made-yet: the bucket answered 404" in err


@pytest.fixture
def s3_site(
    db_url: str, engine: Engine, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Site, str]]:
    monkeypatch.setenv("LAIR_REGISTRY_BLOBS", s3_url)
    for site in make_site(db_url, engine):
        yield site, db_url


def test_an_upload_while_the_store_is_down_is_503_and_stores_nothing_then_goes_through(
    s3: S3Server, s3_url: str, s3_site: tuple[Site, str]
) -> None:
    site, db_url = s3_site
    bucket = s3_url.removeprefix("s3://").split("/")[0]
    data = tar_gz(encode(site.report()))
    before = db_snapshot(db_url)
    s3.stop()
    try:
        r = site.post(data)
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == str(OBJECT_STORE_RETRY_S)
        err = r.json()["error"]
        assert (err["code"], err["message"]) == ("unavailable", "the registry's object store is unavailable")
        assert db_snapshot(db_url) == before  # no report row, no measurement
    finally:
        s3.start()
    assert s3.objects(bucket) == {}  # and no object
    again = site.post(data)
    assert again.status_code == 201, again.text
    rid = again.json()["id"]
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        sent = {  # the report's folder is the archive's one top folder
            m.name.split("/", 1)[1]: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
        }
    stored = {k.removeprefix(f"blobs/reports/{rid}/"): v for k, v in s3.objects(bucket).items()}
    assert stored == sent
    assert site.client.get(f"/reports/{rid}/files/results.json").content == sent["results.json"]
