"""A tune's run is stopped to the end even when Ctrl-C lands in the middle of its stop.

``lair tune`` stops each trial's engine in a ``finally``; a SIGINT that arrived while that stop ran
cut it short and left the run holding the machine (seen once in a full run of
``test_tune_tiny_cpu.py::test_sigint_then_resume``). Here the interrupt is raised at the stop's first
progress line, on a real detached launch of the bundled tiny llama.cpp recipe; the run's journal and
the machine's leases are the oracle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lair.inventory.leases import leases
from lair.launch import Request, launch
from lair.launch.journal import Journal
from lair.tune.search_loop import stop_interrupted

pytestmark = [pytest.mark.integration]

TINY = Path(__file__).resolve().parents[3] / "examples" / "tiny-cpu" / "recipe.toml"


def test_a_ctrl_c_during_the_stop_still_stops_the_run(lair_home: Path) -> None:
    res = launch(Request(recipe=str(TINY), accept=True), detach=True)
    assert Journal(res.run_id).load().state == "running"
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        if len(said) == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stop_interrupted(res.run_id, say)
    assert len(said) > 1  # the first stop was cut at its first line, the second ran on
    assert Journal(res.run_id).load().state == "stopped"
    assert res.run_id not in {lease.run_id for lease in leases().values()}


def test_a_run_that_never_started_has_nothing_to_stop(lair_home: Path) -> None:
    stop_interrupted("tiny-cpu-never-launched", lambda line: pytest.fail(f"said {line!r}"))
