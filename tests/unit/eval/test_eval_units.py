"""Suites resolve offline with located, actionable errors; the result model's statistics by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lair.errors import EvalError
from lair.eval.records import RepeatResult, SampleRecord, SuiteResult
from lair.eval.suites import resolve_suite


def _rec(doc: int, verdict: str) -> SampleRecord:
    return SampleRecord(doc, "h", "out", "t", 1.0 if verdict == "pass" else 0.0, verdict)


def test_spread_flips_and_interval_by_hand() -> None:
    r1 = RepeatResult(0.5, 0.25, 4, 1, 1.0, "m", {}, [_rec(0, "pass"), _rec(1, "pass"), _rec(2, "fail")])
    r2 = RepeatResult(0.75, 0.2, 4, 2, 2.0, "m", {}, [_rec(0, "pass"), _rec(1, "fail"), _rec(2, "pass")])
    d = SuiteResult("s", "t", "lm_eval", "m", [r1, r2]).as_dict()
    assert d["score"] == pytest.approx(0.625) and d["stderr"] == pytest.approx(0.225)
    assert d["ci95"] == pytest.approx([0.625 - 1.96 * 0.225, 1.0])  # clipped at 1
    assert d["spread"]["flips"] == 2 and d["spread"]["std"] == pytest.approx(0.125)
    assert d["wall_s"] == 3.0 and d["seeds"] == [1, 2] and not math.isnan(d["score"])


def test_task_yaml_relative_data_files_resolve_against_the_file(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"q": "a", "a": "b"}\n')
    task = tmp_path / "t.yaml"
    task.write_text("task: t\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: d.jsonl\n")
    spec = resolve_suite(str(task))
    assert isinstance(spec.task, dict)
    assert spec.task["dataset_kwargs"]["data_files"]["test"] == str(tmp_path / "d.jsonl")
    (tmp_path / "d.jsonl").unlink()
    with pytest.raises(EvalError, match=r"data file .*d\.jsonl does not exist"):
        resolve_suite(str(task))


def test_tasks_that_run_code_in_the_harness_are_refused(tmp_path: Path) -> None:
    task = tmp_path / "u.yaml"
    task.write_text("task: u\nunsafe_code: true\ndataset_path: json\n")
    with pytest.raises(EvalError, match="unsafe_code") as exc:
        resolve_suite(str(task))
    assert "--suite humaneval" in exc.value.hint


def test_local_data_replaces_every_split_and_drops_few_shot(tmp_path: Path) -> None:
    data = tmp_path / "g.jsonl"
    data.write_text('{"question": "q", "answer": "#### 1"}\n')
    spec = resolve_suite("gsm8k", data)
    assert isinstance(spec.task, dict)
    cfg = spec.task
    assert cfg["dataset_path"] == "json" and cfg["dataset_kwargs"] == {"data_files": {"test": str(data)}}
    assert "fewshot_split" not in cfg and "training_split" not in cfg and cfg["num_fewshot"] == 0
    with pytest.raises(EvalError, match="no such file"):
        resolve_suite("gsm8k", tmp_path / "missing.jsonl")


def test_unknown_suite_says_did_you_mean() -> None:
    with pytest.raises(EvalError, match="unknown suite 'gsm8kk'") as exc:
        resolve_suite("gsm8kk")
    assert "gsm8k" in exc.value.hint
    with pytest.raises(EvalError, match="no such task YAML"):
        resolve_suite("nowhere/task.yaml")
