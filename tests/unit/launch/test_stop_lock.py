"""The run's stop lock: a teardown whose wait for it is cancelled (Ctrl-C) leaves it free.

The wait used to be a blocking flock in a worker thread: cancelling the wait did not stop the thread,
which took the lock once its holder let go and kept it with no one to release it, so the stop retried
after the Ctrl-C (``lair tune``'s ``stop_interrupted``) waited on its own process for ever, and so did
any ``lair stop`` of that run (a CI run of ``test_sigint_then_resume`` timed out there after 120 s).
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from lair.launch.journal import Journal


def test_a_cancelled_wait_leaves_the_lock_free_once_its_holder_lets_go() -> None:
    j = Journal("lock-1")
    holder = j.try_lock_stop()
    assert holder is not None
    assert j.try_lock_stop() is None  # held: a second taker is refused, not blocked

    threads = set(threading.enumerate())

    async def cancelled_wait() -> None:
        waiter = asyncio.create_task(j.lock_stop())
        await asyncio.sleep(0)  # the waiter runs to its first await: it tried once and was refused
        assert not waiter.done()  # it waits while the holder holds (a free lock: done in that step)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(cancelled_wait())
    assert set(threading.enumerate()) <= threads  # no thread left behind that could take it later
    Journal.unlock(holder)
    again = j.try_lock_stop()
    assert again is not None, "the cancelled wait took the lock after all"
    Journal.unlock(again)


def test_the_wait_ends_when_the_holder_lets_go() -> None:
    j = Journal("lock-2")
    holder = j.try_lock_stop()
    assert holder is not None

    async def wait() -> tuple[int, float]:
        asyncio.get_running_loop().call_later(0.3, Journal.unlock, holder)
        t0 = time.monotonic()
        fd = await j.lock_stop()
        return fd, time.monotonic() - t0

    fd, waited = asyncio.run(wait())
    assert 0.3 <= waited < 2.0
    assert j.try_lock_stop() is None  # this process holds it now
    Journal.unlock(fd)
    free = j.try_lock_stop()
    assert free is not None
    Journal.unlock(free)
