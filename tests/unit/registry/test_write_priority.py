"""Writes first (:mod:`lair.registry.web.priority`): the event loop waits for a running write, within
its budgets, and every write route's transaction and every read through the front take part.

The budgets here are hundreds of milliseconds (the app's are 10 and 200), so that a loaded machine
cannot blur the three cases: a write shorter than the grace is waited for to its end, a longer one
only for the grace, and a stream of writes for no more than the share of a second."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from registry_paths import LLAMA
from sqlalchemy import Engine, event
from starlette.testclient import TestClient

from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import seed_examples
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.registry.web.priority import WritePriority

SLUG = "tiny-cpu"


def _write_for(priority: WritePriority, seconds: float) -> tuple[threading.Thread, threading.Event]:
    """A write of ``seconds`` on a thread of its own; the event is set once it is running."""
    begun = threading.Event()

    def run() -> None:
        with priority.writing():
            begun.set()
            time.sleep(seconds)

    t = threading.Thread(target=run)
    t.start()
    assert begun.wait(5)
    return t, begun


def test_no_write_no_wait() -> None:
    priority = WritePriority(grace_s=1.0, share_s=1.0)
    t = time.monotonic()
    assert priority.step_aside() == 0.0 and time.monotonic() - t < 0.05
    assert priority.writes == 0


def test_a_short_write_is_waited_for_to_its_end() -> None:
    priority = WritePriority(grace_s=2.0, share_s=2.0)
    start = time.monotonic()
    writer, _ = _write_for(priority, 0.6)
    assert priority.writes == 1
    waited = priority.step_aside()
    ended = time.monotonic() - start
    writer.join()
    assert priority.writes == 0
    assert 0.3 <= waited <= 1.5 and ended >= 0.59  # to the write's end, well before the grace


def test_a_long_write_is_waited_for_only_the_grace() -> None:
    priority = WritePriority(grace_s=0.3, share_s=5.0)
    writer, _ = _write_for(priority, 1.5)
    waited = priority.step_aside()
    assert 0.15 <= waited <= 0.9  # the grace (from the write's start), not the 1.5 s
    assert priority.step_aside() == 0.0  # the grace is spent: the loop goes on beside the write
    assert priority.writes == 1
    writer.join()


def test_a_stream_of_writes_is_waited_for_no_more_than_the_share() -> None:
    priority = WritePriority(grace_s=0.4, share_s=0.5)
    total, start = 0.0, time.monotonic()
    for _ in range(3):  # three writes in a row, each within the same second
        writer, _ = _write_for(priority, 0.45)
        total += priority.step_aside()
        writer.join()
    assert time.monotonic() - start < 2.0  # (else the window turned over: the check below is moot)
    # 0.4 for the first, the share's last 0.1 for the second, none after (without the share: 1.2)
    assert 0.45 <= total <= 0.75


class _Ticking:
    """A clock that moves on ``tick`` seconds each time it is read (powers of two: sums are exact)."""

    def __init__(self, start: float, tick: float) -> None:
        self.t, self.tick = start, tick

    def __call__(self) -> float:
        t, self.t = self.t, self.t + self.tick
        return t


def test_the_share_is_of_each_second_and_renews_with_the_next() -> None:
    """Counted on the priority's own clock: each wait reads it twice (one tick), so the share of two
    ticks is spent after two waits; a second later the loop gives way again. (The real waits are the
    share's few milliseconds, ended by its timeout: the write is held open throughout.)"""
    tick = 2.0**-9
    clock = _Ticking(128.0, tick)
    priority = WritePriority(grace_s=60.0, share_s=2 * tick, clock=clock)
    with priority.writing():
        first_second = [priority.step_aside() for _ in range(3)]
        clock.t += 1.0
        next_second = [priority.step_aside() for _ in range(3)]
    assert first_second == [tick, tick, 0.0]
    assert next_second == [tick, tick, 0.0]


@pytest.fixture
def site(db_url: str, engine: Engine) -> Iterator[tuple[TestClient, Any, str]]:
    reset_limits()
    with engine.begin() as conn:
        seed_examples(conn)
        token = create_token(conn, create_user(conn, "alice", "correct horse battery"), "t")
    app = create_app(db_url)
    with TestClient(app) as client:
        yield client, app, token


def test_write_routes_take_their_turn_and_reads_step_aside(
    site: tuple[TestClient, Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each write route's transaction counts as a running write while it commits (API, form and
    upload alike go through ``committed``); each read through the front asks to step aside, and
    a write does not."""
    client, app, token = site
    priority = app.app.state.priority
    at_commit: list[int] = []
    event.listen(app.app.state.engine, "commit", lambda _c: at_commit.append(priority.writes))
    asked: list[str] = []
    real = priority.step_aside

    def step_aside() -> float:
        asked.append("read")
        return float(real())

    monkeypatch.setattr(priority, "step_aside", step_aside)
    auth = {"authorization": f"Bearer {token}"}
    assert client.put(f"/api/v1/recipes/{SLUG}/vote", headers=auth).status_code == 200
    assert at_commit and set(at_commit) == {1} and priority.writes == 0
    assert asked == []  # a write does not wait for writes
    at_commit.clear()
    text = LLAMA.read_text()
    made = client.post("/api/v1/recipes", json={"toml": text, "notes": "n"}, headers=auth)
    assert made.status_code == 201, made.text
    assert at_commit and set(at_commit) == {1}
    for url in (f"/api/v1/recipes/{SLUG}.json", f"/recipes/{SLUG}", "/api/v1/recipes?engine=vllm"):
        assert client.get(url).status_code == 200
    assert asked == ["read"] * 3


def test_a_read_during_a_write_is_answered_after_it(site: tuple[TestClient, Any, str]) -> None:
    """Through the app: while a write transaction is open (held 0.3 s on a thread), a read of a
    stored document is answered only once the write ended, within the app's grace; after the grace
    the reads go on beside a write that is still running."""
    client, app, _ = site
    state = app.app.state
    priority = state.priority
    priority.grace_s = priority.share_s = 2.0
    from lair.registry.web.writes import committed

    released = threading.Event()

    def hold(seconds: float) -> None:
        with committed(state):
            released.wait(seconds)

    writer = threading.Thread(target=hold, args=(0.3,))
    start = time.monotonic()
    writer.start()
    while priority.writes == 0:
        time.sleep(0.001)
    assert client.get(f"/api/v1/recipes/{SLUG}.json").status_code == 200
    assert time.monotonic() - start >= 0.29
    writer.join()
    priority.grace_s = priority.share_s = 0.2
    writer = threading.Thread(target=hold, args=(10.0,))
    writer.start()
    while priority.writes == 0:
        time.sleep(0.001)
    try:
        t = time.monotonic()
        assert client.get(f"/api/v1/recipes/{SLUG}.json").status_code == 200
        assert client.get(f"/recipes/{SLUG}").status_code == 200
        assert time.monotonic() - t < 5.0 and priority.writes == 1  # served while the write still runs
    finally:
        released.set()
        writer.join()
