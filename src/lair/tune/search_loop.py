"""The search: ask Optuna for a candidate, refuse it early if it cannot run, launch it, bench it.

One trial: the candidate's recipe (the starting recipe with its knobs set) is checked like any
recipe, its engine command is read from its plan and given to the engine's own parser, and lair fit
sizes it; a refusal is recorded and nothing starts. Otherwise it is launched (detached, then stopped
once measured), benched on the objective's cells, guarded for quality when it changes outputs, and
written as a normal run report under ``trials/``. A running engine is kept for the next candidate
when that candidate launches exactly the same engine command and env (nothing at launch changed).
Ctrl-C stops the engine, marks the trial interrupted and leaves the study to be resumed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lair.errors import LairError, LaunchError
from lair.tune.check import NOT_CHECKED, engine_argv, failure_reason, fit_check, parse_check
from lair.tune.space import UNSET, apply, current_value
from lair.tune.study import COUNTED, open_study, record, stale_to_failed

if TYPE_CHECKING:
    import optuna

    from lair.launch import LaunchResult
    from lair.launch.resolve import Consent
    from lair.recipe import Recipe
    from lair.tune.objective import Constraint, Guard, Objective
    from lair.tune.space import Space

__all__ = ["Candidate", "TuneOptions", "gate", "run_search", "stop_interrupted", "study_name"]

Progress = Callable[[str], None]
_PREFETCH_MAX = 256
_MAX_DUPLICATES = 50


@dataclass
class TuneOptions:
    recipe: Path
    space: Space
    objectives: list[Objective]
    constraints: list[Constraint] = field(default_factory=list)
    guard: Guard | None = None
    budget_s: float = 45 * 60.0
    trials: int = 20
    name: str | None = None
    out_dir: Path | None = None
    rig: str | None = None
    values: dict[str, str] = field(default_factory=dict)
    accept: bool | str = False
    """Accept what an untrusted starting recipe asks for (stored for that content only)."""
    decode_tokens: int = 64
    repeat: int = 1
    guard_limit: int | None = None
    confirm: bool = True
    write: Path | None = None
    progress: Progress = field(default=lambda _m: None, repr=False)

    def cells(self) -> tuple[list[int], list[int]]:
        terms = [t for o in self.objectives for t in o.terms] + [c.term for c in self.constraints]
        return sorted({t.cell.context for t in terms}), sorted({t.cell.concurrency for t in terms})

    def spec(self) -> dict[str, Any]:
        return {
            "space": self.space.as_dict(),
            "objectives": [o.label for o in self.objectives],
            "constraints": [c.text for c in self.constraints],
            "guard": str(self.guard) if self.guard else None,
            "decode_tokens": self.decode_tokens,
            "repeat": self.repeat,
        }


def study_name(opts: TuneOptions, recipe: Recipe) -> str:
    """``<slug>-<8 hex>``: the same recipe, space and objective give the same study (a resume)."""
    base = recipe.meta.slug or opts.recipe.stem
    digest = hashlib.sha256(json.dumps(opts.spec(), sort_keys=True).encode()).hexdigest()[:8]
    return f"{base}-{digest}"


@dataclass
class Candidate:
    trial: Any
    params: dict[str, str]
    text: str
    key: str = ""
    recipe: Any = None
    started: float = field(default_factory=time.monotonic)

    @property
    def number(self) -> int:
        return int(self.trial.number)


class Search:
    """State of one tune while it runs (see the module docstring)."""

    def __init__(
        self, opts: TuneOptions, study: optuna.Study, folder: Path, base_text: str, consent: Consent
    ) -> None:
        self.opts, self.study, self.folder, self.base_text = opts, study, folder, base_text
        self.consent = consent
        self.t0 = time.monotonic()
        self.durations: list[float] = []
        self.parsed: dict[str, str | None] = {}
        self.duplicates = 0
        self.say = opts.progress
        self.ctx_needed = max(opts.cells()[0]) + opts.decode_tokens
        self.c_needed = max(opts.cells()[1])
        self.hardware = _hardware(opts)
        self.baseline = {p.name: current_value(_toml(base_text), p.name) for p in opts.space.params}
        self.current: Candidate | None = None

    # ---- candidates ------------------------------------------------------------------------
    def _tmp(self, tag: str, text: str) -> Path:
        """A new file beside the recipe (its relative paths resolve the same) holding ``text``:
        created exclusively under a random name (``mkstemp``), so nothing planted is followed."""
        fd, name = tempfile.mkstemp(
            prefix=f".{self.opts.recipe.stem}.tune-{tag}.", suffix=".toml", dir=self.opts.recipe.parent
        )
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return Path(name)

    def _plan(self, text: str, tag: str) -> tuple[Any, Any]:
        """(recipe, plan) of a candidate text; the file lives beside the recipe while planned. The
        candidate is derived from the gated start (:func:`gate`): its trust, nothing stored."""
        from lair.launch import Request, prepare

        path = self._tmp(tag, text)
        try:
            req = Request(recipe=str(path), rig=self.opts.rig, values=self.opts.values, derived=self.consent)
            req.doctor = False
            prep = prepare(req, lease=False)
            return prep.recipe, prep.plan
        finally:
            path.unlink(missing_ok=True)

    def _parse_key(self, argv: list[str] | None) -> str:
        return json.dumps(argv)

    def prefetch(self) -> None:
        """Every candidate's engine command through its parser at once (one engine start-up)."""
        space = self.opts.space
        if space.size() > _PREFETCH_MAX:
            return
        argvs: list[list[str] | None] = []
        for i, combo in enumerate(space.combos()):
            try:
                _, plan = self._plan(apply(self.base_text, combo), f"p{i}")
            except LairError:
                continue
            argvs.append(engine_argv(plan))
        todo = [a for a in dict.fromkeys(self._parse_key(a) for a in argvs) if a not in self.parsed]
        if todo:
            self.say(f"checking {len(todo)} engine command(s) with the engine's own parser")
            for k, r in zip(todo, parse_check([json.loads(k) for k in todo]), strict=True):
                self.parsed[k] = r

    def _suggest(self, trial: optuna.Trial) -> dict[str, str]:
        return {
            p.name: str(trial.suggest_categorical(p.name, list(p.values))) for p in self.opts.space.params
        }

    def _seen(self, params: dict[str, str]) -> int | None:
        for t in self.study.get_trials(deepcopy=False):
            if t.user_attrs.get("outcome") in COUNTED and t.user_attrs.get("knobs") == params:
                return int(t.number)
        return None

    def counted(self) -> int:
        return sum(1 for t in self.study.get_trials(deepcopy=False) if t.user_attrs.get("outcome") in COUNTED)

    def distinct(self) -> int:
        seen = {
            json.dumps(t.user_attrs.get("knobs"), sort_keys=True)
            for t in self.study.get_trials(deepcopy=False)
            if t.user_attrs.get("outcome") in COUNTED
        }
        return len(seen)

    def time_left(self) -> bool:
        est = statistics.fmean(self.durations) if self.durations else 0.0
        reserve = 2 * est if self.opts.confirm else 0.0
        return time.monotonic() - self.t0 + est + reserve <= self.opts.budget_s

    def _done(self) -> str | None:
        if self.counted() >= self.opts.trials:
            return f"{self.opts.trials} trials done"
        if self.distinct() >= self.opts.space.size():
            return "every candidate of the space was tried"
        if not self.time_left():
            return "the budget is spent"
        if self.duplicates >= _MAX_DUPLICATES:
            return "the sampler proposes only candidates already tried"
        return None

    def next_candidate(self) -> Candidate | None:
        """The next candidate worth launching (refused ones are recorded on the way); None: done."""
        while (why := self._done()) is None:
            trial = self.study.ask()
            params = self._suggest(trial)
            self.current = Candidate(trial, params, "")
            dup = self._seen(params)
            if dup is not None:
                self.duplicates += 1
                record(self.study, trial, {"outcome": "duplicate", "reason": f"same as trial {dup}"}, None)
                self.current = None
                continue
            self.duplicates = 0
            cand = self._checked(Candidate(trial, params, apply(self.base_text, params)))
            if cand is not None:
                self.current = cand
                return cand
            self.current = None
        self.say(f"search done: {why}")
        self.stop_reason = why
        return None

    def _refuse(self, c: Candidate, stage: str, reason: str, checks: dict[str, str]) -> None:
        self.say(f"trial {c.number}: refused by {stage}: {reason}")
        attrs = {"outcome": "refused", "stage": stage, "reason": reason, "knobs": c.params, "checks": checks}
        record(self.study, c.trial, attrs, None)

    def _checked(self, c: Candidate) -> Candidate | None:
        from lair.recipe import check_text

        checks: dict[str, str] = {}
        result = check_text(c.text, str(self.opts.recipe), "toml")
        if not result.ok:
            self._refuse(
                c, "recipe check", "; ".join(i.render().splitlines()[0] for i in result.errors), checks
            )
            return None
        try:
            c.recipe, plan = self._plan(c.text, f"t{c.number}")
        except LairError as exc:
            self._refuse(c, "plan", exc.message, checks)
            return None
        argv = engine_argv(plan)
        key = self._parse_key(argv)
        if key not in self.parsed:
            self.parsed[key] = parse_check([argv])[0]
        parsed = self.parsed[key]
        checks["parser"] = parsed or "ok"
        if parsed is not None and not parsed.startswith(NOT_CHECKED):
            self._refuse(c, "engine parser", parsed, checks)
            return None
        reason, what = fit_check(
            c.recipe,
            self.opts.recipe.parent,
            self.hardware,
            context=self.ctx_needed,
            concurrency=self.c_needed,
        )
        checks["fit"] = what
        if reason is not None:
            self._refuse(c, "fit", reason, checks)
            return None
        c.key = json.dumps([argv, sorted(c.recipe.env.items())])
        c.trial.set_user_attr("checks", checks)
        return c

    # ---- running ---------------------------------------------------------------------------
    def _request(self, path: Path, recipe: Recipe) -> Any:
        from lair.launch import Request
        from lair.launch.resolve import new_run_id

        return Request(
            recipe=str(path),
            rig=self.opts.rig,
            values=self.opts.values,
            run_id=new_run_id(recipe, str(path)),
            derived=self.consent,
        )

    def launch(self, c: Candidate) -> LaunchResult | None:
        """Start the candidate's engine (detached); None when it failed (recorded with its reason)."""
        from lair.launch import launch

        path = self._tmp(f"t{c.number}", c.text)
        req = self._request(path, c.recipe)
        c.started = time.monotonic()
        self.say(f"trial {c.number}: launching {_knobs(c.params)}")
        try:
            return launch(req, detach=True, progress=self.say)
        except KeyboardInterrupt:  # Ctrl-C while it started: whatever of it runs is stopped first
            stop_interrupted(req.run_id, self.say)
            raise
        except LaunchError as exc:
            reason = failure_reason(_saved_log(req.run_id), exc.message)
            self.say(f"trial {c.number}: launch failed: {reason}")
            report = self._report(c, None, req.run_id, [])
            attrs = {"outcome": "failed", "stage": "launch", "reason": reason, "knobs": c.params}
            record(self.study, c.trial, attrs | {"run_id": req.run_id, "report": str(report)}, None)
            self.durations.append(time.monotonic() - c.started)
            return None
        finally:
            path.unlink(missing_ok=True)

    def _bench(self, res: LaunchResult) -> Any:
        from lair.bench import BenchOptions, run_bench

        contexts, concurrency = self.opts.cells()
        opts = BenchOptions(
            contexts=contexts,
            concurrency=concurrency,
            decode_tokens=self.opts.decode_tokens,
            repeat=self.opts.repeat,
            api_key=res.api_key,
            keep_going=True,
            progress=self.say,
        )
        return run_bench(res.endpoint.removesuffix("/v1"), opts)

    def _guard_eval(self, res: LaunchResult) -> tuple[float | None, Any, str | None]:
        """``lair eval`` of the running engine on the guard's suite: (points, the evaluation, why it
        failed). A failed eval is the trial's reason, not the end of the tune."""
        from lair.eval import EvalOptions, run_eval

        assert self.opts.guard is not None
        opts = EvalOptions(suites=[self.opts.guard.suite], limit=self.opts.guard_limit, progress=self.say)
        opts.api_key = res.api_key
        try:
            ev = run_eval(res.endpoint.removesuffix("/v1"), opts)
        except LairError as exc:
            self.say(f"quality guard: the eval failed: {exc.message}")
            return None, None, exc.message
        return (100.0 * ev.suites[0].score if ev.suites else None), ev, None

    def _needs_guard(self, c: Candidate) -> bool:
        if self.opts.guard is None:
            return False
        if c.trial.user_attrs.get("baseline"):
            return True
        return any(
            p.changes_output and c.params[p.name] != self.baseline[p.name] for p in self.opts.space.params
        )

    def _guard(self, c: Candidate, res: LaunchResult) -> tuple[str | None, Any]:
        """The guard's reason to reject ``c`` (None: it passes, or changes no output) and the
        evaluation it ran (for the trial's report). The start's score is the study's reference."""
        guard = self.opts.guard
        if guard is None or not self._needs_guard(c):
            return None, None
        score, ev, error = self._guard_eval(res)
        c.trial.set_user_attr("guard_score", score)
        if c.trial.user_attrs.get("baseline"):
            self.study.set_user_attr("guard_baseline", score)
            self.study.set_user_attr("guard_baseline_error", error)
            return None, ev
        if error is not None:
            return f"quality {guard}: the eval failed: {error}", ev
        attrs = self.study.user_attrs
        return guard.verdict(score, attrs.get("guard_baseline"), attrs.get("guard_baseline_error")), ev

    def _limits(self, cells: list[Any]) -> tuple[list[float], list[str]]:
        """Constraint values (<= 0 holds) and what failed."""
        out, why = [], []
        for lim in self.opts.constraints:
            ok, v = lim.holds(cells)
            out.append(0.0 if ok else 1.0 + abs((v or 0.0) - lim.limit))
            if not ok:
                why.append(f"{lim.term.metric}@{lim.term.cell} = {v} (limit {lim.op} {lim.limit:g})")
        return out, why

    def measure(self, c: Candidate, res: LaunchResult, run_id: str) -> None:
        """Bench a ready candidate, guard it, and record the trial."""
        self.say(f"trial {c.number}: benchmarking {_knobs(c.params)}")
        result = self._bench(res)
        cells = [cell.as_dict() for cell in result.cells]
        attrs: dict[str, Any] = {"knobs": c.params, "run_id": run_id, "cells": cells}
        attrs["client_bound"] = any(cell["client_bound"] for cell in cells)
        failure = result.failure()
        values = [o.value(cells) for o in self.opts.objectives]
        if failure is not None or any(v is None for v in values):
            reason = failure.message if failure else "the bench has no value for an objective's cell"
            self.say(f"trial {c.number}: failed: {reason}")
            attrs["report"] = str(self._report(c, result, run_id, res.secrets))
            record(
                self.study, c.trial, attrs | {"outcome": "failed", "stage": "bench", "reason": reason}, None
            )
        else:
            limits, why = self._limits(cells)
            guarded, ev = self._guard(c, res)
            attrs["report"] = str(self._report(c, result, run_id, res.secrets, ev))
            if guarded is not None:
                limits, why = [*limits, 1.0], [*why, guarded]
            outcome = "rejected" if why else "ok"
            attrs |= {"outcome": outcome, "values": values, "constraint_values": limits or [0.0]}
            if why:
                attrs |= {"stage": "limits" if len(why) > 1 or guarded is None else "guard"}
                attrs["reason"] = "; ".join(why)
            self.say(f"trial {c.number}: {outcome}: {', '.join(f'{v:.4g}' for v in values if v is not None)}")
            record(self.study, c.trial, attrs, [float(v) for v in values if v is not None])
        self.durations.append(time.monotonic() - c.started)

    def _report(
        self, c: Candidate, result: Any, run_id: str, secrets: list[str], evaluation: Any = None
    ) -> Path:
        """The trial's run report (with the guard's evaluation and its per-sample records, if any)."""
        from lair.report import write_run_report

        out = self.folder / "trials" / f"{c.number:04d}"
        path = self._tmp(f"r{c.number}", c.text)
        try:
            doc = result if result is not None else _no_bench(run_id)
            logs = {"head": _live_log(run_id)}
            return write_run_report(
                path, run_id, doc, logs, self.opts.values, out_dir=out, secrets=secrets, evaluation=evaluation
            )
        finally:
            path.unlink(missing_ok=True)


def _no_bench(run_id: str) -> dict[str, Any]:
    return {
        "url": "",
        "model": "",
        "started_at": "",
        "finished_at": "",
        "options": {},
        "cells": [],
        "run": run_id,
    }


def _live_log(run_id: str) -> str:
    from lair.launch import follow_logs

    lines: list[str] = []
    try:
        follow_logs(run_id, node=None, follow=False, lines=400, emit=lines.append)
    except LairError:
        return _saved_log(run_id)
    return "\n".join(lines)


def _saved_log(run_id: str | None) -> str:
    from lair.launch import Journal

    if not run_id:
        return ""
    try:
        j = Journal(run_id)
        return "\n".join(j.saved_log(n.rank) or "" for n in j.load().nodes)
    except (LairError, OSError):
        return ""


def _knobs(params: dict[str, str]) -> str:
    return " ".join(f"{k}={'-' if v == UNSET else v}" for k, v in params.items())


def _toml(text: str) -> dict[str, Any]:
    import tomllib

    return tomllib.loads(text)


def _hardware(opts: TuneOptions) -> Any:
    """The GPUs lair fit sizes candidates on: the rig's [hardware], else the recipe's; None: none known."""
    from lair.fit import Hardware, find_device
    from lair.fit.catalog import GIB

    src: Any = None
    if opts.rig:
        from lair.rig import load_rig

        src = load_rig(opts.rig).hardware
    if src is None or not getattr(src, "gpu_model", None):
        from lair.recipe import load_recipe

        src = load_recipe(opts.recipe).meta.hardware
    if src is None or not src.gpu_model:
        return None
    try:
        device = find_device(src.gpu_model)
    except LairError:
        return None
    mem = int(src.vram_gb * GIB) if getattr(src, "vram_gb", None) else None
    ram = int(src.host_ram_gb * GIB) if getattr(src, "host_ram_gb", None) else None
    return Hardware(device, gpus=int(src.gpu_count or 1), host_ram_bytes=ram, memory_bytes=mem)


def _loop(s: Search) -> None:
    cand = s.next_candidate()
    while cand is not None:
        res = s.launch(cand)
        if res is None:
            cand = s.next_candidate()
            continue
        nxt: Candidate | None = None
        try:
            while True:
                s.measure(cand, res, res.run_id)
                nxt = s.next_candidate()
                if nxt is None or nxt.key != cand.key:
                    break
                s.say(f"trial {nxt.number}: same engine command and env: the running engine is kept")
                nxt.started = time.monotonic()
                cand = nxt
        finally:
            stop_interrupted(res.run_id, s.say)
        cand = nxt


def stop_interrupted(run_id: str, say: Progress) -> None:
    """Stop the run, to the end even when Ctrl-C comes during the stop (the stop is done again,
    then the interrupt goes on). A run that never got as far as its journal has nothing to stop."""
    from lair.launch import stop_run
    from lair.launch.journal import Journal

    if not Journal(run_id).exists:
        return
    try:
        stop_run(run_id, progress=say)
    except KeyboardInterrupt:
        stop_run(run_id, progress=say)
        raise


def _interrupted(s: Search) -> None:
    c = s.current
    if c is None:
        return
    from optuna.trial import TrialState

    frozen = s.study._storage.get_trial(c.trial._trial_id)
    if frozen.state == TrialState.RUNNING:
        attrs = {"outcome": "interrupted", "reason": "Ctrl-C during the trial", "knobs": c.params}
        record(s.study, c.trial, attrs, None)


def gate(opts: TuneOptions) -> Consent:
    """The consent gate of a tune, before anything of the recipe runs (its hooks, its engine, its
    engine's parser): the starting recipe planned as ``lair plan`` would, an untrusted one accepted
    (``opts.accept``: stored for exactly that content) or refused with a TrustError. Every candidate
    is then planned under this consent (:class:`~lair.launch.resolve.Consent`), stored nowhere."""
    from lair.launch import Request, prepare

    req = Request(recipe=str(opts.recipe), rig=opts.rig, accept=opts.accept, values=opts.values)
    req.doctor = False
    consent = prepare(req, lease=False).consent
    assert consent is not None
    return consent


def run_search(
    opts: TuneOptions, folder: Path, name: str, consent: Consent | None = None
) -> tuple[optuna.Study, Search]:
    """Create or resume the study and run trials until the trials, the space or the budget is spent."""
    consent = consent or gate(opts)
    base_text = opts.recipe.read_text(encoding="utf-8")
    doc = _toml(base_text)
    opts.space = opts.space.with_baseline({p.name: current_value(doc, p.name) for p in opts.space.params})
    folder.mkdir(parents=True, exist_ok=True)
    study = open_study(folder, name, opts.space, [o.goal for o in opts.objectives])
    spec = json.dumps(opts.spec(), sort_keys=True)
    if study.user_attrs.get("spec", spec) != spec:
        from lair.errors import ConfigError

        raise ConfigError(
            f"study {name} in {folder} was made for another space or objective",
            hint="pass another --name, or remove that folder",
        )
    study.set_user_attr("spec", spec)
    s = Search(opts, study, folder, base_text, consent)
    stale = stale_to_failed(study)
    if stale:
        s.say(f"resuming study {name}: {stale} interrupted trial(s) marked as such")
    elif study.trials:
        s.say(f"resuming study {name}: {len(study.trials)} trial(s) so far")
    if not any(t.user_attrs.get("baseline") and t.user_attrs.get("outcome") in COUNTED for t in study.trials):
        study.enqueue_trial(s.baseline, user_attrs={"baseline": True}, skip_if_exists=False)
    s.prefetch()
    try:
        _loop(s)
    except KeyboardInterrupt:
        _interrupted(s)
        raise
    finally:
        for p in s.opts.recipe.parent.glob(f".{s.opts.recipe.stem}.tune-*.toml"):
            p.unlink(missing_ok=True)
    return study, s


def copy_report(src: str | Path, dst: Path) -> Path:
    shutil.copytree(src, dst, dirs_exist_ok=True)
    return dst
