"""The Optuna study of a tune: its storage (SQLite in the tune's folder), sampler and trial records.

Every trial carries user attributes that say what became of it: ``outcome`` (``ok``, ``rejected``:
measured but over a limit or the quality guard, ``refused``: never launched, ``failed``: launched
and failed, ``interrupted``, ``duplicate``: the same knobs as an earlier trial, not run again),
``stage`` and ``reason`` for the last four, ``values`` (the objectives' values), ``report`` (the
trial's run report folder). Only ``ok`` trials are results; Optuna sees refused, failed and
interrupted trials as failed, duplicates as pruned.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from lair.tune.space import Space

__all__ = ["COUNTED", "open_study", "record", "stale_to_failed"]

COUNTED = ("ok", "rejected", "refused", "failed")
"""Outcomes that count towards ``--trials`` (an interrupted or duplicate trial does not)."""


def _grid(grid: dict[str, list[str]], seed: int | None) -> Any:
    from optuna.samplers import GridSampler

    class Grid(GridSampler):
        """Optuna's grid without its ``study.stop()`` once the grid is covered (that works only inside
        ``optimize``; the tune stops itself when every candidate was tried)."""

        def after_trial(self, *args: Any, **kwargs: Any) -> None:
            return None

    return Grid(grid, seed=seed)


def _sampler(space: Space) -> Any:
    import optuna

    if space.sampler == "grid":
        return _grid({p.name: list(p.values) for p in space.params}, space.seed)
    if space.sampler == "random":
        return optuna.samplers.RandomSampler(seed=space.seed)
    # the limits and the guard reach TPE as the trial's constraints (``record``: set_constraint)
    return optuna.samplers.TPESampler(seed=space.seed, n_startup_trials=min(5, max(1, space.size() // 3)))


def open_study(folder: Path, name: str, space: Space, directions: list[str]) -> optuna.Study:
    """The study ``name`` in ``folder/study.db``: created, or loaded to resume."""
    import logging

    import optuna

    optuna.logging.set_verbosity(logging.WARNING)
    storage = f"sqlite:///{folder / 'study.db'}"
    study = optuna.create_study(
        storage=storage,
        study_name=name,
        sampler=_sampler(space),
        directions=["maximize" if d == "max" else "minimize" for d in directions],
        load_if_exists=True,
    )
    return study


def record(
    study: optuna.Study, trial: optuna.Trial, attrs: dict[str, Any], values: list[float] | None
) -> None:
    """Finish ``trial`` with its outcome (``attrs["outcome"]``) and, for a result, its values."""
    from optuna.trial import TrialState

    for k, v in attrs.items():
        trial.set_user_attr(k, v)
    for i, v in enumerate(attrs.get("constraint_values", ())):  # > 0: infeasible, for TPE
        trial.set_constraint(f"c{i}", float(v))
    outcome = attrs["outcome"]
    if outcome in ("ok", "rejected") and values is not None:
        study.tell(trial, values)
    elif outcome == "duplicate":
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, state=TrialState.FAIL)


def stale_to_failed(study: optuna.Study) -> int:
    """Trials left running by an interrupted tune become ``interrupted`` (failed for Optuna)."""
    from optuna.trial import TrialState

    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
        if t.state == TrialState.WAITING:
            continue
        study._storage.set_trial_user_attr(t._trial_id, "outcome", "interrupted")
        study._storage.set_trial_user_attr(t._trial_id, "reason", "the tune was interrupted during it")
        study.tell(t.number, state=TrialState.FAIL)
        n += 1
    return n
