"""``lair eval`` through the real CLI and the real lm-eval against a server whose answers are chosen
in advance (``lair.testing.answer_server``): every score here is known by hand."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lair.testing.answer_server import running_answer_server

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
ARITH = ROOT / "src" / "lair" / "eval" / "tasks" / "lair_arith.jsonl"
DATA = ROOT / "tests" / "data" / "eval"


def lair(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "lair", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **(env or {})},
    )


def _arith() -> list[dict[str, str]]:
    return [json.loads(line) for line in ARITH.read_text().splitlines()]


def _requests(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(url + "/requests", timeout=10) as r:
        data: list[dict[str, Any]] = json.loads(r.read())
        return data


def _samples(report: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (report / "eval_samples.jsonl").read_text().splitlines()]


def test_arith_score_known_by_hand_with_report(tmp_path: Path) -> None:
    rows = _arith()
    right = [0, 3, 5, 8, 13, 21, 34]  # answered correctly; one of them inside a sentence
    rules = [{"contains": rows[i]["question"], "reply": f" {rows[i]['answer']}\n"} for i in right[:-1]]
    rules.append({"contains": rows[34]["question"], "reply": f" It is {rows[34]['answer']}, surely."})
    rules.append({"contains": rows[1]["question"], "reply": f" {int(rows[1]['answer']) + 1}"})  # off by one
    with running_answer_server({"rules": rules, "default": " I do not know"}) as url:
        res = lair("eval", url, "--suite", "lair_arith", "--out", str(tmp_path / "rep"), "--json")
        sent = _requests(url)
    assert res.returncode == 0, res.stderr
    (suite,) = json.loads(res.stdout)["suites"]
    p = len(right) / len(rows)
    assert suite["n"] == len(rows) == 36 and suite["score"] == pytest.approx(p)
    assert suite["stderr"] == pytest.approx(math.sqrt(p * (1 - p) / (len(rows) - 1)))
    assert suite["ci95"] == pytest.approx([p - 1.96 * suite["stderr"], p + 1.96 * suite["stderr"]])
    samples = _samples(tmp_path / "rep")
    assert sorted(s["doc_id"] for s in samples if s["verdict"] == "pass") == right
    by_prompt = {hashlib.sha256(b["prompt"].encode()).hexdigest(): b for b in sent}
    assert len(sent) == 36 and {s["prompt_hash"] for s in samples} == set(by_prompt)
    assert all(b["model"] == "answers" and b["temperature"] == 0.0 for b in sent)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Quality" in md and "| lair_arith | exact_match,first-integer | 19.4% |" in md
    assert "<table class='quality'>" in (tmp_path / "rep" / "report.html").read_text()
    show = lair("report", "show", str(tmp_path / "rep"))
    assert show.returncode == 0 and "| lair_arith | exact_match,first-integer | 19.4% |" in show.stdout


def test_repeats_spread_and_flips_from_seeded_answers(tmp_path: Path) -> None:
    rows = _arith()
    # question 0 right in both repeats; 1 and 2 right only in the first (seed 7), 3 only in the second
    rules = [{"contains": rows[0]["question"], "reply": rows[0]["answer"]}]
    rules += [{"contains": rows[i]["question"], "reply": rows[i]["answer"], "seed": 7} for i in (1, 2)]
    rules.append({"contains": rows[3]["question"], "reply": rows[3]["answer"], "seed": 8})
    with running_answer_server({"rules": rules, "default": "x"}) as url:
        res = lair("eval", url, "--suite", "lair_arith", "--repeat", "2", "--seed", "7", "--json")
        seeds = sorted({b["seed"] for b in _requests(url)})
    assert res.returncode == 0, res.stderr
    (suite,) = json.loads(res.stdout)["suites"]
    assert seeds == [7, 8] and suite["seeds"] == [7, 8] and suite["repeats"] == 2
    sp = suite["spread"]
    assert sp["scores"] == pytest.approx([3 / 36, 2 / 36]) and sp["flips"] == 3
    assert suite["score"] == pytest.approx(2.5 / 36) and sp["min"] == pytest.approx(2 / 36)


def test_compare_shows_quality_deltas(tmp_path: Path) -> None:
    rows = _arith()
    for name, k in (("a", 9), ("b", 18)):
        rules = [{"contains": r["question"], "reply": r["answer"]} for r in rows[:k]]
        with running_answer_server({"rules": rules, "default": "x"}) as url:
            assert lair("eval", url, "--suite", "lair_arith", "--out", str(tmp_path / name)).returncode == 0
    res = lair("report", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json")
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)["quality"]
    assert row["a"] == pytest.approx(0.25) and row["b"] == pytest.approx(0.5)
    assert row["delta_pp"] == pytest.approx(25.0)
    text = lair("report", "compare", str(tmp_path / "a"), str(tmp_path / "b")).stdout
    assert "| lair_arith | exact_match,first-integer | 25.0% | 50.0% | +25.0 | 36 | 36 |" in text


def test_gsm8k_from_a_local_file_with_lm_evals_own_task(tmp_path: Path) -> None:
    data = DATA / "gsm8k_four.jsonl"
    replies = {
        "Tom has 3": "3 + 4 = 7\n#### 7",  # strict match
        "A box holds": "6 * 3 = 18 eggs\n#### 19",  # wrong
        "Sara had": "20 - 8 = 12, so 12",  # no '####': strict-match misses it
        "A train": "60 * 2 = 120\n#### 120",
    }
    rules = [{"contains": k, "reply": v} for k, v in replies.items()]
    with running_answer_server({"rules": rules}) as url:
        res = lair(
            "eval", url, "--suite", "gsm8k", "--data", str(data), "--out", str(tmp_path / "r"), "--json"
        )
        sent = _requests(url)
    assert res.returncode == 0, res.stderr
    (suite,) = json.loads(res.stdout)["suites"]
    assert suite["metric"] == "exact_match,strict-match" and suite["n"] == 4
    assert suite["score"] == pytest.approx(0.5)
    assert suite["metrics"]["exact_match,flexible-extract"] == pytest.approx(0.75)
    assert all(b["prompt"].startswith("Question: ") and "Question:" in b["stop"] for b in sent)
    verdicts = {s["doc_id"]: s["verdict"] for s in _samples(tmp_path / "r")}
    assert verdicts == {0: "pass", 1: "fail", 2: "fail", 3: "pass"}


def test_missing_data_set_names_the_command_that_fetches_it(tmp_path: Path) -> None:
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub")}
    res = lair("eval", "http://127.0.0.1:9", "--suite", "gsm8k", env=env)
    assert res.returncode == 1
    assert "data set openai/gsm8k is not in the local Hugging Face cache" in res.stderr
    assert "hf download openai/gsm8k --repo-type dataset" in res.stderr
    res = lair(
        "eval",
        "http://127.0.0.1:9",
        "--suite",
        "humaneval",
        env=env,
    )
    assert res.returncode == 1 and "hf download openai/openai_humaneval --repo-type dataset" in res.stderr


def test_chat_api_with_thinking_off_and_a_task_yaml(tmp_path: Path) -> None:
    task = tmp_path / "tasks" / "mine.yaml"
    task.parent.mkdir()
    (task.parent / "qa.jsonl").write_text(
        '{"q": "colour of the sky?", "a": "blue"}\n{"q": "2 + 2?", "a": "4"}\n'
    )
    task.write_text(
        "task: mine\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: qa.jsonl\n"
        "test_split: test\noutput_type: generate_until\ndoc_to_text: '{{q}}'\ndoc_to_target: '{{a}}'\n"
        "generation_kwargs:\n  until: ['\\n']\nmetric_list:\n  - metric: exact_match\n"
    )
    rules = [{"contains": "sky", "reply": "blue"}, {"contains": "2 + 2", "reply": "five"}]
    with running_answer_server({"rules": rules}) as url:
        res = lair("eval", url, "--suite", str(task), "--api", "chat", "--thinking", "off", "--json")
        sent = _requests(url)
    assert res.returncode == 0, res.stderr
    (suite,) = json.loads(res.stdout)["suites"]
    assert suite["suite"] == str(task) and suite["score"] == pytest.approx(0.5)
    assert all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in sent)
    assert {b["messages"][-1]["content"] for b in sent} == {"colour of the sky?", "2 + 2?"}
