"""The registry re-scores a report's evaluation from its per-sample records (pure function of the
files). Inputs are hand-made records in ``lair eval``'s format; every expected figure is worked out
by hand from the bundled lair_arith answers (doc 0: 95, doc 1: -7, doc 2: 5865, doc 3: 69) and the
task's rule: the first integer of the output equals the answer."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest

from lair.registry.service.rescore import check_eval

TARGETS = ["95", "-7", "5865", "69"]
OUTPUTS = [  # repeat 0: pass pass fail fail; repeat 1: pass fail pass pass
    [" 95\n", " -7 apples", " 5866", " I do not know"],
    [" 95", " 7", "It is 5865.", " 69"],
]
PASSES = [[1, 1, 0, 0], [1, 0, 1, 1]]
# repeat 0: mean 1/2, sample sd sqrt(1/3), stderr sqrt(1/3)/2; repeat 1: mean 3/4, sd 1/2, stderr 1/4
STDERR = (math.sqrt(1 / 3) / 2 + 0.25) / 2


def _sample(k: int, i: int, suite: str = "lair_arith") -> dict[str, Any]:
    ok = PASSES[k][i]
    row = {"suite": suite, "doc_id": i, "prompt_hash": f"h{i}", "output": OUTPUTS[k][i], "target": TARGETS[i]}
    return row | {"score": float(ok), "verdict": "pass" if ok else "fail", "repeat": k, "detail": ""}


def _suite(name: str = "lair_arith", kind: str = "lm_eval") -> dict[str, Any]:
    return {"suite": name, "task": name, "kind": kind, "metric": "exact_match,first-integer", "score": 0.625,
            "n": 4, "stderr": STDERR, "repeats": 2,
            "spread": {"scores": [0.5, 0.75], "min": 0.5, "max": 0.75, "std": 0.125, "flips": 3}}  # fmt: skip


def _report(
    suites: list[dict[str, Any]] | None = None, limit: int | None = 4
) -> tuple[dict[str, Any], list[Any]]:
    doc = {"eval": {"options": {"limit": limit, "data": {}}, "suites": suites or [_suite()]}}
    samples = [_sample(k, i) for k in (0, 1) for i in range(4)]
    return doc, samples


def _check(doc: dict[str, Any], samples: list[dict[str, Any]]) -> tuple[list[Any], list[str]]:
    files = {"eval_samples.jsonl": "".join(json.dumps(s) + "\n" for s in samples).encode()}
    return check_eval(doc, files)


def test_an_honest_lair_arith_evaluation_is_verified() -> None:
    rows, reasons = _check(*_report())
    assert reasons == []
    assert rows == [
        {
            "suite": "lair_arith",
            "metric": "exact_match,first-integer",
            "score": 62.5,
            "unit": "%",
            "n": 4,
            "stderr": pytest.approx(100 * STDERR, abs=1e-12),
            "repeats": 2,
            "spread_min": 50.0,
            "spread_max": 75.0,
            "flips": 3,
            "provenance": "verified",
            "note": "",
        }
    ]


def test_a_verdict_flipped_to_correct_is_refused() -> None:
    doc, samples = _report()
    samples[2] |= {"score": 1.0, "verdict": "pass"}  # repeat 0, doc 2 answered 5866
    doc["eval"]["suites"][0] |= {"score": 0.75, "spread": {"min": 0.75, "max": 0.75, "flips": 2}}
    rows, reasons = _check(doc, samples)
    assert rows == []
    assert (
        "eval suite lair_arith repeat 0 document 2: score 1.0 in the report; re-scoring its output gives "
        "0.0 (answer '5866', target '5865')"
    ) in reasons


def test_an_edited_score_is_refused() -> None:
    doc, samples = _report()
    doc["eval"]["suites"][0]["score"] = 0.7
    rows, reasons = _check(doc, samples)
    assert rows == [] and reasons == [
        "eval suite lair_arith: score is 0.7 in results.json; its samples give 0.625"
    ]


def test_an_edited_stderr_is_refused() -> None:
    doc, samples = _report()
    doc["eval"]["suites"][0]["stderr"] = 0.01
    assert _check(doc, samples)[1] == [
        f"eval suite lair_arith: stderr is 0.01 in results.json; its samples give {STDERR}"
    ]


def test_a_dropped_sample_is_refused() -> None:
    doc, samples = _report()
    del samples[3]  # repeat 0, doc 3 (a fail)
    rows, reasons = _check(doc, samples)
    assert rows == []
    assert reasons == [
        "eval suite lair_arith repeat 0: 3 samples for n 4 (missing documents [3], extra or repeated [])"
    ]


def test_a_changed_n_with_its_sample_dropped_is_refused() -> None:
    doc, samples = _report()
    samples = [s for s in samples if s["doc_id"] != 3]  # a consistent 3-sample report...
    doc["eval"]["suites"][0] |= {"n": 3, "score": (2 / 3 + 2 / 3) / 2}
    reasons = _check(doc, samples)[1]
    assert "eval suite lair_arith: n is 3, but --limit 4 over 36 documents gives 4" in reasons  # ...of 4


def test_a_target_edited_to_match_the_output_is_refused() -> None:
    doc, samples = _report()
    samples[2] |= {"target": "5866", "score": 1.0, "verdict": "pass"}
    doc["eval"]["suites"][0] |= {"score": 0.75, "spread": {"min": 0.75, "max": 0.75, "flips": 2}}
    reasons = _check(doc, samples)[1]
    assert reasons == [
        "eval suite lair_arith repeat 0 document 2: "
        "the target is not the data set's reference for this document"
    ]


def test_humaneval_is_kept_as_reported_by_report_after_its_consistency_checks() -> None:
    he = _suite("humaneval", "humaneval") | {"metric": "pass_at_1,sandbox"}
    doc, samples = _report([he])
    samples = [s | {"suite": "humaneval", "output": "    return 1\n"} for s in samples]
    rows, reasons = _check(doc, samples)
    assert reasons == [] and [(r["provenance"], r["score"], r["note"]) for r in rows] == [
        (
            "reported-by-report",
            62.5,
            "HumanEval programs are never run on the registry: verdicts are the report's",
        )
    ]
    bad = copy.deepcopy(samples)
    bad[3] |= {"verdict": "pass"}  # a pass with score 0
    assert _check(doc, bad)[1] == ["eval suite humaneval repeat 0 document 3: verdict 'pass' with score 0.0"]


def test_a_local_data_file_keeps_the_rescoring_but_not_the_references() -> None:
    doc, samples = _report()
    doc["eval"]["options"]["data"] = {"lair_arith": "/data/mine.jsonl"}
    rows, reasons = _check(doc, samples)
    assert reasons == [] and (rows[0]["provenance"], rows[0]["note"]) == (
        "reported-by-report",
        "evaluated on a local data file (--data): references not checked",
    )
    samples[2] |= {"score": 1.0, "verdict": "pass"}
    assert any("re-scoring its output gives 0.0" in r for r in _check(doc, samples)[1])


def test_gsm8k_samples_are_scored_with_gsm8k_s_own_filters() -> None:
    """gsm8k's strict-match takes the number after ``#### ``; its exact match drops commas, ``$``,
    everything up to ``#### `` and a final period, ignoring case."""
    target = "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether.\n#### 72"
    gsm = {"suite": "gsm8k", "task": "gsm8k", "kind": "lm_eval", "metric": "exact_match,strict-match",
           "score": 0.5, "n": 2, "stderr": 0.5, "repeats": 1,
           "spread": {"scores": [0.5], "min": 0.5, "max": 0.5, "std": 0.0, "flips": 0}}  # fmt: skip
    samples = [
        {"suite": "gsm8k", "doc_id": 0, "output": " 48 + 24 = 72.\n#### 72", "target": target, "score": 1.0,
         "verdict": "pass", "repeat": 0},
        {"suite": "gsm8k", "doc_id": 1, "output": " The answer is 72.", "target": target, "score": 0.0,
         "verdict": "fail", "repeat": 0},
    ]  # fmt: skip
    doc = {"eval": {"options": {"limit": 2, "data": {"gsm8k": "/data/gsm8k.jsonl"}}, "suites": [gsm]}}
    rows, reasons = _check(doc, samples)
    assert reasons == [] and rows[0]["score"] == 50.0
    samples[1] |= {"score": 1.0, "verdict": "pass"}  # no "#### " in its output: strict-match finds nothing
    gsm |= {"score": 1.0, "stderr": 0.0, "spread": {"min": 1.0, "max": 1.0, "flips": 0}}
    assert _check(doc, samples)[1] == [
        "eval suite gsm8k repeat 0 document 1: score 1.0 in the report; re-scoring its output gives 0.0 "
        f"(answer '[invalid]', target {target!r})"
    ]


def test_samples_missing_or_of_an_unreported_suite_are_refused() -> None:
    doc, samples = _report()
    assert (
        check_eval(doc, {})[1][0]
        == "eval_samples.jsonl missing from the report (the evaluation's per-sample records)"
    )
    extra = [*samples, _sample(0, 0, suite="other")]
    assert _check(doc, extra)[1] == [
        "eval_samples.jsonl has samples of suite other that results.json does not report"
    ]


def test_a_failed_document_swapped_for_a_copy_of_a_passing_one_is_refused() -> None:
    """The count stays 4 (so a check of the count alone passes), the score rises to 3/4; only the ids
    give it away: document 0 twice, document 3 never."""
    doc, samples = _report()
    samples[3] = copy.deepcopy(samples[0])  # repeat 0: doc 3 (a fail) becomes a second doc 0 (a pass)
    doc["eval"]["suites"][0] |= {
        "score": (3 / 4 + 3 / 4) / 2,
        "spread": {"min": 0.75, "max": 0.75, "flips": 2},
    }
    rows, reasons = _check(doc, samples)
    assert rows == []
    assert (
        "eval suite lair_arith repeat 0: 4 samples for n 4 (missing documents [3], extra or repeated [0])"
    ) in reasons
