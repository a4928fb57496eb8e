"""``lair tune``: search a recipe's own flags on this rig within what fits, and hand back a recipe.

    from lair.tune import TuneOptions, run_tune, parse_params, parse_objective
    result = run_tune(TuneOptions(Path("recipe.toml"), parse_params(["--parallel=1,2,4"]),
                                  [parse_objective("max decode_tok_s_aggregate@ctx=2048,c=4")]))

Modules: :mod:`~lair.tune.space` (knobs and their values, the space file, writing a candidate),
:mod:`~lair.tune.objective` (cells, goals, limits, the quality guard), :mod:`~lair.tune.check` (the
recipe check, the engine's own parser, lair fit: a candidate refused there is never launched),
:mod:`~lair.tune.study` (Optuna: samplers, SQLite storage in the tune's folder, trial outcomes),
:mod:`~lair.tune.search_loop` (the trials: launch, bench, guard, run reports), :mod:`~lair.tune.result`
(the table, the Pareto front, the chart, the winning recipe). docs/tune.md is the user's guide.

The tune's folder (``<recipe dir>/tunes/<study>/``) holds ``study.db`` (the Optuna study: run the
same command again to resume it), ``trials/NNNN/`` (a run report per launched trial),
``confirm/start`` and ``confirm/best`` (the confirmation runs), ``objective.svg``, ``report.md`` and
``tune.json`` (what ``--json`` prints).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lair.launch.trust_store import mark_untrusted
from lair.tune.objective import Constraint, Guard, Objective, parse_constraint, parse_guard, parse_objective
from lair.tune.search_loop import Search, TuneOptions, gate, run_search, study_name
from lair.tune.space import UNSET, Param, Space, load_space, parse_params

__all__ = [
    "UNSET",
    "Constraint",
    "Guard",
    "Objective",
    "Param",
    "Space",
    "TuneOptions",
    "TuneResult",
    "load_space",
    "parse_constraint",
    "parse_guard",
    "parse_objective",
    "parse_params",
    "run_tune",
]


@dataclass
class TuneResult:
    """The tune as ``--json`` prints it (and ``tune.json`` holds)."""

    study: str
    folder: str
    recipe: str
    objectives: list[str]
    constraints: list[str]
    guard: str | None
    sampler: str
    space: dict[str, Any]
    stop_reason: str
    elapsed_s: float
    budget_s: float
    counts: dict[str, int]
    trials: list[dict[str, Any]]
    best: dict[str, Any] | None
    pareto: list[int] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    """Trials the sampler spent on knobs tried already (nothing ran): their numbers and why."""
    confirmation: dict[str, Any] | None = None
    winner: str | None = None
    chart: str | None = None
    report: str | None = None

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


_CLIENT_BOUND_RETRIES = 2


def _folder(opts: TuneOptions, name: str) -> Path:
    return opts.out_dir if opts.out_dir is not None else opts.recipe.parent / "tunes" / name


def _counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    out = {k: 0 for k in ("ok", "rejected", "refused", "failed", "interrupted")}
    for r in rows:
        out[r["outcome"]] = out.get(r["outcome"], 0) + 1
    return out


def _confirm_one(s: Search, path: Path, tag: str) -> dict[str, Any]:
    """A fresh launch and bench of one recipe file; its report under ``confirm/<tag>``."""
    from lair.launch import launch, stop_run
    from lair.recipe import load_recipe
    from lair.report import write_run_report

    recipe = load_recipe(path)
    req = s._request(path, recipe)
    s.say(f"confirmation: {tag}: launching {path.name}")
    try:
        res = launch(req, detach=True, progress=s.say)
    except Exception as exc:
        from lair.errors import LairError

        if not isinstance(exc, LairError):
            raise
        return {"recipe": str(path), "error": exc.message}
    try:
        result = s._bench(res)
        for _ in range(_CLIENT_BOUND_RETRIES):  # the bench, not the engine, limited it: measure again
            if not any(c.client_bound for c in result.cells):
                break
            s.say(f"confirmation: {tag}: the bench was client-bound; measuring again")
            result = s._bench(res)
        logs = {"head": _log(res.run_id)}
        out = s.folder / "confirm" / tag
        report = write_run_report(
            path, res.run_id, result, logs, s.opts.values, out_dir=out, secrets=res.secrets
        )
    finally:
        stop_run(res.run_id, progress=s.say)
    cells = [c.as_dict() for c in result.cells]
    values = [o.value(cells) for o in s.opts.objectives]
    bound = any(c["client_bound"] for c in cells)
    return {
        "recipe": str(path),
        "values": values,
        "report": str(report),
        "failure": _failure(result),
        "client_bound": bound,
    }


def _failure(result: Any) -> str | None:
    f = result.failure()
    return f.message if f is not None else None


def _log(run_id: str) -> str:
    from lair.tune.search_loop import _live_log

    return _live_log(run_id)


def _beats(objectives: list[Objective], start: list[Any], best: list[Any]) -> bool:
    if any(v is None for v in [*start, *best]):
        return False
    return all(not o.better(a, b) for o, a, b in zip(objectives, start, best, strict=True)) and any(
        o.better(b, a) for o, a, b in zip(objectives, start, best, strict=True)
    )


def _stamp(s: Search, name: str, rows: list[dict[str, Any]], best: dict[str, Any]) -> dict[str, Any]:
    from lair.recipe import load_recipe
    from lair.recipe.digest import model_sha256

    opts = s.opts
    start = next((r for r in rows if r["baseline"] and r["values"]), None)
    counts = _counts(rows)
    original = load_recipe(opts.recipe)
    return {
        "study": name,
        "tuned_from": original.meta.slug or opts.recipe.name,
        "from_sha256": model_sha256(original),
        "objectives": [o.label for o in opts.objectives],
        "constraints": [c.text for c in opts.constraints],
        "guard": str(opts.guard) if opts.guard else None,
        "sampler": opts.space.sampler,
        "trials": sum(counts[k] for k in ("ok", "rejected", "refused", "failed")),
        "refused": counts["refused"],
        "failed": counts["failed"],
        "best_trial": best["trial"],
        "knobs": {k: v for k, v in best["knobs"].items()},
        "start_values": [float(v) for v in start["values"]] if start else [],
        "best_values": [float(v) for v in best["values"]],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _winner_path(opts: TuneOptions) -> Path:
    return opts.write or opts.recipe.with_name(f"{opts.recipe.stem}.tuned.toml")


def _write_files(result: TuneResult, rows: list[dict[str, Any]], objectives: list[Objective]) -> None:
    import json

    from lair.tune.result import objective_chart, trials_table

    folder = Path(result.folder)
    if any(r["values"] for r in rows):
        (folder / "objective.svg").write_text(objective_chart(rows, objectives[0]), encoding="utf-8")
        result.chart = str(folder / "objective.svg")
    lines = [
        f"# lair tune: {result.study}",
        "",
        f"Recipe `{result.recipe}`; objective {', '.join(result.objectives)}"
        + (f"; limits {', '.join(result.constraints)}" if result.constraints else "")
        + (f"; quality guard {result.guard}" if result.guard else ""),
        f"Sampler {result.sampler}; stopped: {result.stop_reason}; "
        f"{result.elapsed_s:.0f} s of {result.budget_s:.0f} s.",
        "",
        trials_table(rows, objectives, markdown=True, duplicates=result.duplicates),
        "",
    ]
    if result.confirmation:
        c = result.confirmation
        lines += [
            f"Confirmation: start {c['start'].get('values')}, best {c['best'].get('values')}: "
            f"{'the best beats the start' if c['beats'] else 'the best does not beat the start'}.",
            "",
        ]
    if result.chart:
        lines += ["![objective per trial](objective.svg)", ""]
    result.report = str(folder / "report.md")
    (folder / "report.md").write_text("\n".join(lines), encoding="utf-8")
    (folder / "tune.json").write_text(json.dumps(result.as_dict(), indent=2) + "\n", encoding="utf-8")


def run_tune(opts: TuneOptions) -> TuneResult:
    """Search (or resume), confirm the best against the start with fresh launches, write the winner
    and the tune's folder. Ctrl-C leaves a resumable study (KeyboardInterrupt goes on)."""
    from lair.recipe import load_recipe
    from lair.tune.result import duplicate_trials, pareto, trial_rows, write_winner

    t0 = time.monotonic()
    consent = gate(opts)  # before anything of the recipe runs, or any folder is made
    recipe = load_recipe(opts.recipe)
    name = opts.name or study_name(opts, recipe)
    folder = _folder(opts, name)
    study, s = run_search(opts, folder, name, consent)
    rows = trial_rows(study, opts.objectives)
    ok = [r for r in rows if r["outcome"] == "ok"]
    best = ok[0] if ok else None
    result = TuneResult(
        study=name,
        folder=str(folder),
        recipe=str(opts.recipe),
        objectives=[o.label for o in opts.objectives],
        constraints=[c.text for c in opts.constraints],
        guard=str(opts.guard) if opts.guard else None,
        sampler=opts.space.sampler,
        space=opts.space.as_dict(),
        stop_reason=getattr(s, "stop_reason", ""),
        elapsed_s=0.0,
        budget_s=opts.budget_s,
        counts=_counts(rows),
        trials=rows,
        best=best,
        pareto=sorted(pareto(rows, opts.objectives)) if len(opts.objectives) > 1 else [],
        duplicates=duplicate_trials(study),
    )
    if best is not None and not best["baseline"]:
        winner = write_winner(opts.recipe, _winner_path(opts), best["knobs"], _stamp(s, name, rows, best))
        if not consent.trusted:  # a stranger's recipe with your knobs is still theirs
            mark_untrusted(winner, consent.source)
        result.winner = str(winner)
        s.say(f"winning recipe (trial {best['trial']}): {winner}")
        if opts.confirm:
            start, tuned = _confirm_one(s, opts.recipe, "start"), _confirm_one(s, winner, "best")
            beats = _beats(opts.objectives, start.get("values") or [None], tuned.get("values") or [None])
            result.confirmation = {"start": start, "best": tuned, "beats": beats}
    elif best is not None:
        s.say("the starting recipe is the best candidate: no new recipe written")
    result.elapsed_s = round(time.monotonic() - t0, 1)
    _write_files(result, rows, opts.objectives)
    return result
