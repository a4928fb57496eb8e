"""Uploads wait for one of the worker threads that check them; one that waits too long is answered
503 ``busy`` with ``Retry-After`` and stores nothing, while the upload that holds the thread goes on
to its own answer. The check itself is replaced by one that blocks until the test lets it go (the
input of the queue under test); the queue, its limiter and its timeout are the real ones."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa
from upload_site import Site, site  # noqa: F401  (the fixture)

from lair.registry.web import report_routes


@pytest.fixture
def one_slot(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    started, release = threading.Event(), threading.Event()
    real = report_routes._accept

    def held(*args: Any) -> dict[str, Any]:
        started.set()
        assert release.wait(30), "the test never released the first upload"
        return real(*args)

    monkeypatch.setattr(report_routes, "UPLOAD_THREADS", 1)
    monkeypatch.setattr(report_routes, "UPLOAD_QUEUE_S", 0.3)
    monkeypatch.setattr(report_routes, "_accept", held)
    report_routes._LIMITERS.clear()
    yield started, release
    release.set()
    report_routes._LIMITERS.clear()


def test_an_upload_that_waits_too_long_is_503_busy_with_retry_after(
    site: Site,  # noqa: F811
    one_slot: tuple[threading.Event, threading.Event],
) -> None:
    started, release = one_slot
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(site.upload, site.report())
        assert started.wait(30)  # the first upload holds the only thread
        second = site.upload(site.report(), as_other=True)  # another account's: it waits, then 503
        assert second.status_code == 503, second.text
        assert second.headers["retry-after"] == str(report_routes.BUSY_RETRY_S)
        body = second.json()
        assert body["error"]["code"] == "busy" and body["error"]["retry_after"] == report_routes.BUSY_RETRY_S
        with site.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM reports")).scalar_one() == 0
        release.set()
        assert first.result(30).status_code == 201  # the held upload was never abandoned
    with site.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM reports")).scalar_one() == 1


def test_one_account_cannot_hold_the_upload_threads(
    site: Site,  # noqa: F811
    one_slot: tuple[threading.Event, threading.Event],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While one of an account's uploads is checked, its next is 429 at once (it neither takes nor
    waits for a thread); another account's upload gets the free thread meanwhile."""
    started, release = one_slot
    monkeypatch.setattr(report_routes, "UPLOAD_THREADS", 2)
    report_routes._LIMITERS.clear()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(site.upload, site.report())
        assert started.wait(30)
        started.clear()
        again = site.upload(site.report())
        assert again.status_code == 429, again.text
        assert again.json()["error"]["code"] == "rate_limited" and not started.is_set()
        second = pool.submit(site.upload, site.report(), as_other=True)
        assert started.wait(30)  # the other account's check is on the second thread, the first still held
        release.set()
        statuses = sorted([first.result(30).status_code, second.result(30).status_code])
    assert statuses == [201, 409]  # the same raw timings: whichever is checked second is the duplicate
    with site.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM reports")).scalar_one() == 1
