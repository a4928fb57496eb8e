"""Fault injection: a pause at the start of a start-up stage, so a test can land a signal there.

Most start-up stages (``prepare``, ``stage_mounts``, ``start``) pass in milliseconds; nothing can
reliably send SIGINT or SIGTERM *during* them. With

    LAIR_PAUSE_BEFORE_STAGE=<stage>[,<stage>...]

``lair launch``, at the start of each named stage (before any node runs a step of it), says
``paused before <stage>`` (stderr and the run's ``events.log``) and waits there for a signal. The
signal cancels start-up exactly as it would mid-stage: rollback, ``after_stop``, cleanup, exit 130.
No signal within :data:`PAUSE_MAX_S` fails the launch (rolled back too), so a forgotten variable
never leaves a run hanging. Unset or empty, it does nothing. An unknown stage name is an error
before anything is leased.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping

from lair.errors import LaunchError
from lair.plan import Stage

__all__ = ["PAUSABLE", "PAUSE_ENV", "PAUSE_MAX_S", "pause_before", "pause_stages"]

PAUSE_ENV = "LAIR_PAUSE_BEFORE_STAGE"
PAUSE_MAX_S = 120.0
PAUSABLE = (Stage.PREPARE, Stage.BEFORE_SERVE, Stage.STAGE_MOUNTS, Stage.START, Stage.SERVE, Stage.READY)
"""The stages ``lair launch`` runs before serving, in order (the only ones a signal can cancel)."""


def pause_stages(environ: Mapping[str, str] = os.environ) -> frozenset[Stage]:
    """The stages named in ``LAIR_PAUSE_BEFORE_STAGE`` (empty when unset)."""
    names = [n.strip() for n in environ.get(PAUSE_ENV, "").split(",") if n.strip()]
    known = {s.value for s in PAUSABLE}
    bad = [n for n in names if n not in known]
    if bad:
        raise LaunchError(
            f"{PAUSE_ENV}: not a start-up stage: {', '.join(bad)}",
            hint=f"use one or more of {', '.join(s.value for s in PAUSABLE)} (comma-separated)",
        )
    return frozenset(Stage(n) for n in names)


async def pause_before(stage: Stage, stages: frozenset[Stage], say: Callable[[str], None]) -> None:
    """If ``stage`` is in ``stages``: say so, then wait for a signal (it cancels the waiting task)."""
    if stage not in stages:
        return
    say(f"paused before {stage.value} ({PAUSE_ENV}): waiting for a signal")
    await asyncio.sleep(PAUSE_MAX_S)
    raise LaunchError(f"{PAUSE_ENV}: no signal within {PAUSE_MAX_S:g}s of pausing before {stage.value}")
