"""Run ids: unique across days (the date is in them), never reused (the journal refuses an existing one)."""

from __future__ import annotations

import re
import time

import pytest

from lair.errors import LaunchError
from lair.launch.journal import Journal, RunRecord
from lair.launch.resolve import new_run_id
from lair.recipe import load_text

RECIPE = load_text('engine = "custom"\ndocker_image = "i:1"\nentrypoint = ["serve"]\n[meta]\nslug = "demo"\n')


def test_the_same_time_of_day_on_two_days_gives_two_ids() -> None:
    day1 = time.mktime((2026, 11, 30, 14, 5, 9, 0, 0, -1))
    day2 = day1 + 86400
    a, b = new_run_id(RECIPE, "r.toml", day1), new_run_id(RECIPE, "r.toml", day2)
    assert re.fullmatch(r"demo-261130-140509-[0-9a-f]{6}", a) and re.fullmatch(
        r"demo-261201-140509-[0-9a-f]{6}", b
    )
    assert a.rsplit("-", 1)[0] != b.rsplit("-", 1)[0]


def test_the_journal_never_overwrites_a_run() -> None:
    rec = RunRecord(
        run_id="demo-1",
        recipe="r",
        name="n",
        runtime="docker",
        endpoint="e",
        state="stopped",
        controller_pid=None,
        created_at=0,
        updated_at=0,
        nodes=[],
    )
    j = Journal("demo-1")
    j.create("{}", rec)
    with pytest.raises(LaunchError, match="a run 'demo-1' exists already"):
        Journal("demo-1").create('{"other": 1}', rec)
    assert j.plan_data() == {}
