"""A PostgreSQL address that accepts connections and then never answers (a server that drops
packets, a hung host): the cache's version read gives up within its timeout with an error the web
layer maps to 503, instead of hanging every request behind it."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

from lair.registry.service.outage import unavailable
from lair.registry.web import cache


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A listening socket nobody accepts on: the kernel completes the handshake, no byte comes back."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def test_a_silent_database_is_an_outage_within_the_timeout(
    silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "PG_TIMEOUT_S", 0.5)
    versions = cache.PgVersions(f"postgresql://lair@127.0.0.1:{silent_port}/registry")

    async def read() -> BaseException:
        try:
            await versions.current()
        except Exception as exc:  # the error under test
            return exc
        raise AssertionError("a silent server answered")

    t0 = time.monotonic()
    exc = asyncio.run(read())
    assert time.monotonic() - t0 < 3.0
    u = unavailable(exc)
    assert u is not None and u.status == 503 and u.retry_after > 0
