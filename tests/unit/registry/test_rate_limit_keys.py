"""The rate limiter's own guarantees: exact counts when form posts count from many worker threads at
once, and bounded keys (a long key part is counted by its sha256, never stored as it came)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from lair.registry.web.auth import MAX_KEY_CHARS, RateLimits


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Threads switch as often as the interpreter lets them: any unguarded window is hit."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_hits_from_many_threads_are_counted_exactly(busy_switching: None) -> None:
    limits = RateLimits()
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _i: limits.hit("250/hour", "write", "alice"), range(1000)))
    assert got.count(True) == 250 and got[:1] == [True]
    assert limits.hit("250/hour", "write", "bob")  # another key: a window of its own


def test_a_long_key_is_counted_by_its_digest() -> None:
    limits = RateLimits()
    long_name = "a" * 200_000
    assert [limits.hit("2/hour", "signin", long_name) for _ in range(3)] == [True, True, False]
    assert limits.hit("2/hour", "signin", "a" * 199_999)  # another name, another count
    keys = list(limits.storage.events)  # type: ignore[attr-defined]
    assert keys and max(len(k) for k in keys) < 2 * MAX_KEY_CHARS
