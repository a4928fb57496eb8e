"""The evaluation of an uploaded report (``results.json``'s ``eval``, ``eval_samples.jsonl``) checked
sample by sample, as a pure function of its files.

For every suite, whatever its kind: the per-sample records must be all there (each repeat holds
documents ``0 .. n-1`` once, as lm-eval numbers them; ``n`` is what ``--limit`` over the data set
gives when the registry knows its size), each verdict must agree with its sample's score, and the
suite's score, stderr and spread over repeats must be what the samples give: a repeat's score is
the mean of its samples' scores, its stderr lm-eval's ``sqrt(sum (x - mean)^2 / (n - 1)) / sqrt(n)``,
the suite's figures the mean over repeats.

Exact-match suites whose task config the registry knows (lair_arith, gsm8k: :mod:`.scoring`) are
re-scored: each sample's verdict is computed again from its output and target with the suite's own
lm-eval filter and metric, and each target must be the data set's reference for that document. A
suite that passes all of it is ``verified``; so is the needle, whose passphrases are regenerated
from the repeat's seed and must be in the answers that pass. Anything else (HumanEval: its programs
are never run on the registry; a task the registry has no config or data set for) is stored as
``reported-by-report``, with the reason, after the consistency checks.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from typing import Any

from lair.registry.service.scoring import NeedleScorer, Scorer, scorer_for

__all__ = ["SAMPLES", "TOL", "check_eval", "mean_stderr"]

SAMPLES = "eval_samples.jsonl"
TOL = 1e-9
"""Reported and recomputed figures are computed from the same 0/1 scores: they agree to rounding."""


def mean_stderr(xs: list[float]) -> float | None:
    """lm-eval's standard error of a mean (sample standard deviation over sqrt n); None below 2."""
    if len(xs) < 2:
        return None
    return statistics.stdev(xs) / math.sqrt(len(xs))


def _close(a: Any, b: float | None) -> bool:
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)):
        return b is None and (a is None or math.isnan(a))
    return isinstance(a, int | float) and math.isclose(float(a), b, rel_tol=0, abs_tol=TOL)


def _samples(files: dict[str, bytes], reasons: list[str]) -> dict[str, list[dict[str, Any]]]:
    if SAMPLES not in files:
        reasons.append(f"{SAMPLES} missing from the report (the evaluation's per-sample records)")
        return {}
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for i, line in enumerate(files[SAMPLES].decode(errors="replace").splitlines()):
        try:
            row = json.loads(line)
            row["doc_id"], row["repeat"] = int(row["doc_id"]), int(row.get("repeat", 0))
            out[str(row["suite"])].append(row)
        except (ValueError, KeyError, TypeError):
            reasons.append(f"{SAMPLES} line {i + 1} is not a sample record")
    return out


def _by_repeat(where: str, suite: dict[str, Any], rows: list[dict[str, Any]], reasons: list[str]) -> Any:
    reps: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        reps[int(r.get("repeat", 0))].append(r)
    want, n = int(suite.get("repeats") or 0), int(suite.get("n") or 0)
    if sorted(reps) != list(range(want)):
        reasons.append(f"{where}: samples of repeats {sorted(reps)}, but the suite reports {want} repeats")
    for k, rs in sorted(reps.items()):
        ids = sorted(int(r["doc_id"]) for r in rs)
        if ids != list(range(n)):
            missing = sorted(set(range(n)) - set(ids))[:5]
            extra = sorted(set(ids) - set(range(n)) | {i for i in ids if ids.count(i) > 1})[:5]
            reasons.append(
                f"{where} repeat {k}: {len(ids)} samples for n {n} (missing documents {missing}, "
                f"extra or repeated {extra})"
            )
    return [reps[k] for k in sorted(reps)]


AnyScorer = Scorer | NeedleScorer


def _verdicts(where: str, rows: list[dict[str, Any]], sc: AnyScorer | None, reasons: list[str]) -> None:
    for r in rows:
        at = f"{where} repeat {r.get('repeat', 0)} document {r['doc_id']}"
        score, verdict = r.get("score"), r.get("verdict")
        if score not in (0, 1) or (verdict == "pass") != (score == 1):
            reasons.append(f"{at}: verdict {verdict!r} with score {score!r}")
        if sc is None:
            continue
        again, got = sc.score(str(r.get("output", "")), str(r.get("target", "")))
        if again != score:
            reasons.append(
                f"{at}: score {score} in the report; re-scoring its output gives {again} "
                f"(answer {got!r}, target {r.get('target')!r})"
            )
        if sc.has_references and sc.reference(r["repeat"], r["doc_id"]) != r.get("target"):
            reasons.append(f"{at}: the target is not the data set's reference for this document")


def _figures(reps: list[list[dict[str, Any]]]) -> dict[str, Any]:
    scores = [statistics.fmean(float(r["score"]) for r in rs) for rs in reps]
    errs = [e for rs in reps if (e := mean_stderr([float(r["score"]) for r in rs])) is not None]
    verdicts: dict[int, set[str]] = defaultdict(set)
    for rs in reps:
        for r in rs:
            verdicts[int(r["doc_id"])].add(str(r.get("verdict")))
    return {
        "score": statistics.fmean(scores),
        "stderr": statistics.fmean(errs) if errs else None,
        "scores": scores,
        "flips": sum(1 for v in verdicts.values() if len(v) > 1),
    }


def _agreement(where: str, suite: dict[str, Any], again: dict[str, Any], reasons: list[str]) -> None:
    spread = suite.get("spread") or {}
    for key, got, have in (
        ("score", again["score"], suite.get("score")),
        ("stderr", again["stderr"], suite.get("stderr")),
        ("spread.min", min(again["scores"]), spread.get("min")),
        ("spread.max", max(again["scores"]), spread.get("max")),
    ):
        if not _close(have, got):
            reasons.append(f"{where}: {key} is {have} in results.json; its samples give {got}")
    if spread.get("flips") != again["flips"]:
        reasons.append(
            f"{where}: spread.flips is {spread.get('flips')} in results.json; samples give {again['flips']}"
        )


def _expected_n(
    where: str, suite: dict[str, Any], sc: AnyScorer | None, limit: Any, reasons: list[str]
) -> None:
    size = sc.size if sc is not None and sc.has_references else None
    if sc is None or size is None:
        return
    if not sc.limited:
        limit = None
    want = min(int(limit), size) if isinstance(limit, int) and limit > 0 else size
    if suite.get("n") != want:
        reasons.append(
            f"{where}: n is {suite.get('n')}, but --limit {limit} over {size} documents gives {want}"
        )


def _row(suite: dict[str, Any], again: dict[str, Any], provenance: str, note: str) -> dict[str, Any]:
    pct = 100.0
    return {
        "suite": str(suite["suite"])[:200],
        "metric": str(suite.get("metric") or "")[:200],
        "score": pct * again["score"],
        "unit": "%",
        "n": int(suite["n"]),
        "stderr": None if again["stderr"] is None else pct * again["stderr"],
        "repeats": len(again["scores"]),
        "spread_min": pct * min(again["scores"]),
        "spread_max": pct * max(again["scores"]),
        "flips": again["flips"],
        "provenance": provenance,
        "note": note,
    }


def _scorer(suite: dict[str, Any], opts: dict[str, Any], local_data: bool) -> AnyScorer | str:
    if suite.get("kind") == "humaneval":
        return "HumanEval programs are never run on the registry: verdicts are the report's"
    if suite.get("kind") == "needle":
        seed, depths = opts.get("seed"), opts.get("needle_depths")
        if not isinstance(seed, int) or not isinstance(depths, list):
            return "the report's options lack the needle's seed and depths"
        return NeedleScorer(seed, len(depths))
    return scorer_for(str(suite.get("suite")), str(suite.get("metric") or ""), references=not local_data)


def _suite(
    suite: dict[str, Any], rows: list[dict[str, Any]], opts: dict[str, Any], reasons: list[str]
) -> dict[str, Any] | None:
    where = f"eval suite {suite.get('suite')}"
    start = len(reasons)
    reps = _by_repeat(where, suite, rows, reasons)
    data = opts.get("data") or {}
    sc = _scorer(suite, opts, bool(data.get(str(suite.get("suite"))) or data.get("")))
    scorer = None if isinstance(sc, str) else sc
    _verdicts(where, rows, scorer, reasons)
    _expected_n(where, suite, scorer, opts.get("limit"), reasons)
    if not reps or len(reasons) > start:
        return None
    again = _figures(reps)
    _agreement(where, suite, again, reasons)
    if len(reasons) > start:
        return None
    if scorer is not None and scorer.has_references:
        return _row(suite, again, "verified", "")
    return _row(suite, again, "reported-by-report", scorer.why_no_references if scorer else str(sc))


def check_eval(doc: dict[str, Any], files: dict[str, bytes]) -> tuple[list[dict[str, Any]], list[str]]:
    """(the report's quality rows, every reason its evaluation is refused); no ``eval``: no rows."""
    ev = doc.get("eval")
    if not ev:
        return [], []
    reasons: list[str] = []
    if not isinstance(ev, dict) or not isinstance(ev.get("suites"), list) or not ev["suites"]:
        return [], ["results.json's eval section lists no suites"]
    by_suite = _samples(files, reasons)
    opts = ev.get("options") or {}
    rows = []
    for suite in ev["suites"]:
        row = _suite(suite, by_suite.pop(str(suite.get("suite")), []), opts, reasons)
        if row is not None:
            rows.append(row)
    reasons += [f"{SAMPLES} has samples of suite {s} that results.json does not report" for s in by_suite]
    return rows, reasons
