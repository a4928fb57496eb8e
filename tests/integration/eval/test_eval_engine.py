"""lm-eval from PyPI against a real engine: llama.cpp's server (the xllamacpp wheel) on the tiny
random model, through ``lair eval``. Random weights answer wrongly, so the expected score is
computed here from the recorded outputs with the task's own rule (first integer == the answer),
independently of lm-eval's filters and metric; the outputs are the engine's own (its log counts
the requests)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ARITH = Path(__file__).resolve().parents[3] / "src" / "lair" / "eval" / "tasks" / "lair_arith.jsonl"


def test_lair_arith_on_the_tiny_engine_scores_what_its_outputs_say(tiny_engine: str, tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "lair", "eval", tiny_engine, "--suite", "lair_arith", "--limit", "8",
         "--repeat", "2", "--out", str(tmp_path / "r"), "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    (suite,) = json.loads(res.stdout)["suites"]
    rows = [json.loads(x) for x in (tmp_path / "r" / "eval_samples.jsonl").read_text().splitlines()]
    answers = [json.loads(x)["answer"] for x in ARITH.read_text().splitlines()]
    assert suite["n"] == 8 and len(rows) == 16 and {r["repeat"] for r in rows} == {0, 1}

    def right(r: dict[str, object]) -> bool:
        m = re.search(r"-?[0-9]+", str(r["output"]))
        return m is not None and m.group(0) == answers[int(str(r["doc_id"]))]

    for k in (0, 1):
        mine = sum(right(r) for r in rows if r["repeat"] == k) / 8
        assert suite["spread"]["scores"][k] == pytest.approx(mine)
    assert all((r["verdict"] == "pass") == right(r) for r in rows)
    assert all(r["output"] for r in rows)  # the engine generated text for every sample


def test_a_right_answer_from_the_engine_is_scored_as_a_pass(scripted_engine: str, tmp_path: Path) -> None:
    """The positive case: the scripted model answers "69" to every prompt, so the documents whose answer
    is 69 (counted here from the task file) must pass and every other one fail; a scorer that always
    fails, or always passes, cannot meet both."""
    res = subprocess.run(
        [sys.executable, "-m", "lair", "eval", scripted_engine, "--suite", "lair_arith", "--limit", "8",
         "--out", str(tmp_path / "r"), "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    (suite,) = json.loads(res.stdout)["suites"]
    rows = [json.loads(x) for x in (tmp_path / "r" / "eval_samples.jsonl").read_text().splitlines()]
    answers = [json.loads(x)["answer"] for x in ARITH.read_text().splitlines()][:8]
    right = {i for i, a in enumerate(answers) if a == "69"}
    assert right == {3}  # the task file's own answers: doc 3 is 33 + 36
    assert [r["output"].strip() for r in rows] == ["69"] * 8  # the engine answered as scripted
    assert {int(r["doc_id"]) for r in rows if r["verdict"] == "pass"} == right
    assert suite["score"] == pytest.approx(len(right) / 8)
