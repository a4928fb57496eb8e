"""``LAIR_PAUSE_BEFORE_STAGE``: parsing, and the pause itself (a cancel ends it, as a signal does)."""

from __future__ import annotations

import asyncio

import pytest

from lair.errors import LaunchError
from lair.launch import fault_injection
from lair.launch.fault_injection import PAUSE_ENV, pause_before, pause_stages
from lair.plan import Stage


def test_unset_or_empty_pauses_nowhere() -> None:
    assert pause_stages({}) == frozenset()
    assert pause_stages({PAUSE_ENV: " , "}) == frozenset()


def test_stages_are_comma_separated() -> None:
    assert pause_stages({PAUSE_ENV: "prepare, start,ready"}) == {Stage.PREPARE, Stage.START, Stage.READY}


@pytest.mark.parametrize("value", ["prepar", "stop", "after_stop,start"])
def test_an_unknown_or_teardown_stage_is_an_error_with_a_hint(value: str) -> None:
    with pytest.raises(LaunchError) as info:
        pause_stages({PAUSE_ENV: value})
    assert "not a start-up stage" in info.value.message and "stage_mounts" in info.value.hint


def test_a_stage_not_named_does_not_pause() -> None:
    said: list[str] = []
    asyncio.run(pause_before(Stage.START, frozenset({Stage.PREPARE}), said.append))
    assert said == []


def test_a_named_stage_waits_until_cancelled() -> None:
    said: list[str] = []

    async def main() -> bool:
        task = asyncio.create_task(pause_before(Stage.START, frozenset({Stage.START}), said.append))
        await asyncio.sleep(0)  # one turn: the task says its marker, then waits
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled()

    assert asyncio.run(main())
    assert said == [f"paused before start ({PAUSE_ENV}): waiting for a signal"]


def test_no_signal_before_the_deadline_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fault_injection, "PAUSE_MAX_S", 0.01)
    with pytest.raises(LaunchError, match=r"no signal within 0\.01s of pausing before ready"):
        asyncio.run(pause_before(Stage.READY, frozenset({Stage.READY}), lambda _m: None))
