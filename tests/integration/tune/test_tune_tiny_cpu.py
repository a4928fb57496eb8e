"""``lair tune`` on the bundled tiny llama.cpp recipe (examples/tiny-cpu, xllamacpp), real launches.

The space is llama.cpp's ``--parallel`` (2 in the recipe; 4; 16, which leaves each of the slots of
``--ctx 8192`` 512 tokens, fewer than the 512 + 128 the objective's cell needs: refused by the fit),
``--threads`` (8 in the test's copy of the recipe, four times this machine's cores: llama.cpp's
threads then wait for each other at every step, a start that one thread beats by far on a busy or an
idle machine alike; 1) and ``--batch-size`` (unset in the recipe; 512; 0, which llama.cpp
takes and then aborts on, ``GGML_ASSERT(n_outputs_max <= ...)``: a failed launch; ``auto``, which the
server's own parser refuses). The grid sampler visits every candidate, so each kind of outcome is
there whatever the measurements; the measurements only decide which one wins.

- the tune (``--json``) finishes inside its budget, every outcome carries its reason (the engine's
  assertion for the failed launches read from their logs), refused candidates were never launched
  (no run report, no run in the journal), every launched trial is a run report;
- the winner is written beside the recipe with its comments and a ``[meta.tune]`` that loads, and the
  confirmation runs (fresh launches of the start and the winner) show it beating the start;
- Ctrl-C (SIGINT) in the middle of a tune: exit 130, nothing left running, and the same command
  resumes the same study with the trial numbers going on;
- ``--publish`` to a real ``lair serve``: the fork of tiny-cpu has the winner as its revision and the
  confirmation run's rows;
- the quality guard on the real ``lair eval``: on a model scripted to answer "69", a grammar that
  cannot say 69 is rejected with both scores, a KV dtype that leaves the answers alone passes.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from lair.testing.cli import lair
from lair.testing.registry import serve_process

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "examples" / "tiny-cpu" / "recipe.toml"
OBJECTIVE = "max decode_tok_s_aggregate@ctx=512,c=4"
SPACE = """\
sampler = "grid"
objective = "max decode_tok_s_aggregate@ctx=512,c=4"
budget = "6m"
trials = 30

[[param]]
name = "--parallel"
values = [4, 16]

[[param]]
name = "--threads"
values = [1]

[[param]]
name = "--batch-size"
values = [512, 0, "auto"]
"""
TUNE = [
    "--decode-tokens",
    "128",
    "--repeat",
    "2",
]  # 32 tokens can come in one read on a busy machine: no decode speed


def _copy(where: Path, space: str = SPACE, threads: str = "8") -> Path:
    recipe = where / "tiny-cpu" / "recipe.toml"
    recipe.parent.mkdir(parents=True)
    text = TINY.read_text()
    assert '"--threads", "2",' in text
    recipe.write_text(text.replace('"--threads", "2",', f'"--threads", "{threads}",'))  # module docstring
    (where / "space.toml").write_text(space)
    return recipe


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory, lair_home: Path) -> tuple[Path, dict[str, Any], float]:
    where = tmp_path_factory.mktemp("tune")
    recipe = _copy(where)
    t0 = time.monotonic()
    res = lair("tune", str(recipe), "--space", str(where / "space.toml"), *TUNE, "--json", timeout=600)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr[-4000:]
    return recipe, json.loads(res.stdout), took


def _by_knobs(doc: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {
        (t["knobs"]["--parallel"], t["knobs"]["--threads"], t["knobs"]["--batch-size"]): t
        for t in doc["trials"]
    }


def test_every_candidate_and_its_outcome(tuned: tuple[Path, dict[str, Any], float]) -> None:
    _, doc, took = tuned
    assert took < 6 * 60 and doc["elapsed_s"] <= doc["budget_s"] == 360
    assert doc["stop_reason"] == "every candidate of the space was tried"
    trials = _by_knobs(doc)
    # the space with the recipe's own values: parallel 2|4|16, threads 8|1, batch (unset)|512|0|auto
    assert len(trials) == 3 * 2 * 4
    for (par, _thr, batch), t in trials.items():
        if batch == "auto":  # the parser comes first
            assert t["outcome"] == "refused" and t["stage"] == "engine parser", t
            assert "argument --batch-size/-b: invalid int value: 'auto'" in t["reason"]
        elif par == "16":
            assert t["outcome"] == "refused" and t["stage"] == "fit", t
            assert (
                t["reason"]
                == "each of the 16 slots holds 512 tokens (8192 / 16); the objective's cells need "
                + str(512 + int(TUNE[TUNE.index("--decode-tokens") + 1]))  # prompt + decode tokens
            )
        elif batch == "0":
            assert t["outcome"] == "failed" and t["stage"] == "launch", t
            assert "GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max) failed" in t["reason"]
        else:
            assert t["outcome"] == "ok", t
            assert t["values"][0] > 0
        launched = t["outcome"] in ("ok", "failed")
        assert (t["report"] is not None) == launched
        if launched:
            report = json.loads((Path(t["report"]) / "results.json").read_text())
            assert report["kind"] == "lair.run_report"
            expected_cells = 1 if t["outcome"] == "ok" else 0
            assert len(report["bench"]["cells"]) == expected_cells
    assert doc["counts"] == {"ok": 8, "rejected": 0, "refused": 12, "failed": 4, "interrupted": 0}
    baseline = [t for t in doc["trials"] if t["baseline"]]
    assert len(baseline) == 1 and baseline[0]["knobs"] == {
        "--parallel": "2",
        "--threads": "8",
        "--batch-size": "(unset)",
    }
    ok = [t for t in doc["trials"] if t["outcome"] == "ok"]
    assert doc["best"]["trial"] == max(ok, key=lambda t: t["values"][0])["trial"] == doc["trials"][0]["trial"]


def test_refused_candidates_never_ran(tuned: tuple[Path, dict[str, Any], float], lair_home: Path) -> None:
    _, doc, _ = tuned
    res = lair("status", "--all", "--json")  # every run, not the last 10 ended ones
    runs = json.loads(res.stdout)
    assert all(r["state"] in ("stopped", "failed") for r in runs)
    launched = sum(1 for t in doc["trials"] if t["outcome"] in ("ok", "failed"))
    confirmations = 2 if doc["confirmation"] else 0
    assert len([r for r in runs if r["name"].startswith("tiny-cpu")]) >= launched + confirmations
    folder = Path(doc["folder"])
    assert len(list((folder / "trials").iterdir())) == launched


def test_winner_file_and_confirmation(tuned: tuple[Path, dict[str, Any], float]) -> None:
    from lair.recipe import load_recipe

    recipe, doc, _ = tuned
    if doc["best"]["baseline"]:
        pytest.fail(f"the starting recipe won: {doc['best']}")
    winner = Path(doc["winner"])
    assert winner == recipe.with_name("recipe.tuned.toml")
    text = winner.read_text()
    assert "# A tiny random-weight Llama served by llama.cpp's own server" in text  # comments kept
    loaded = load_recipe(winner)
    stamp = loaded.meta.tune
    assert stamp is not None and stamp.study == doc["study"] and stamp.best_trial == doc["best"]["trial"]
    assert stamp.knobs == doc["best"]["knobs"] and stamp.refused == 12 and stamp.failed == 4
    argv = loaded.entrypoint + loaded.args
    best = doc["best"]["knobs"]
    assert argv[argv.index("--parallel") + 1] == best["--parallel"]
    assert argv[argv.index("--threads") + 1] == best["--threads"]
    assert ("--batch-size" in argv) == (best["--batch-size"] != "(unset)")
    c = doc["confirmation"]
    assert c["start"]["values"][0] > 0 and c["best"]["values"][0] > 0
    assert c["beats"] is True and c["best"]["values"][0] > c["start"]["values"][0], c
    folder = Path(doc["folder"])
    assert (folder / "study.db").is_file() and (folder / "objective.svg").read_text().startswith("<svg")
    assert doc["study"] in (folder / "report.md").read_text()
    assert json.loads((folder / "tune.json").read_text())["study"] == doc["study"]


def _finished(db: Path, name: str) -> int:
    """Trials of study ``name`` with a counted outcome, read from ``db`` read-only (opening it through
    Optuna would initialize the storage, racing the tune that is creating it: alembic's version row
    inserted twice, an IntegrityError in one of the two)."""
    if not db.exists():
        return 0
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as con:
            rows = con.execute(
                "SELECT a.value_json FROM trial_user_attributes a JOIN trials t USING (trial_id)"
                " JOIN studies s USING (study_id) WHERE s.study_name = ? AND a.key = 'outcome'",
                (name,),
            ).fetchall()
    except sqlite3.OperationalError:  # the tables are not made yet
        return 0
    return sum(1 for (value,) in rows if json.loads(value) in ("ok", "failed", "refused"))


def test_sigint_then_resume(tmp_path: Path, lair_home: Path) -> None:
    recipe = _copy(tmp_path)
    args = [
        "tune",
        str(recipe),
        "--space",
        str(tmp_path / "space.toml"),
        *TUNE,
        "--name",
        "resume",
        "--no-confirm",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "lair", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    db = recipe.parent / "tunes" / "resume" / "study.db"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and _finished(db, "resume") < 3 and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # a hung tune would hold the machine for every later test
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"lair tune did not end within 120 s of its SIGINT:\n{err[-3000:]}")
    assert proc.returncode == 130, err[-3000:]
    first = _finished(db, "resume")
    assert 3 <= first < 24
    runs = json.loads(lair("status", "--json").stdout)
    assert all(r["state"] in ("stopped", "failed") for r in runs), runs
    res = lair(*args, "--json", timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert doc["study"] == "resume" and doc["stop_reason"] == "every candidate of the space was tried"
    assert "resuming study resume" in res.stderr
    numbers = sorted(t["trial"] for t in doc["trials"] if t["outcome"] != "interrupted")
    assert len(numbers) == 24 and len(set(numbers)) == 24
    assert sum(1 for t in doc["trials"] if t["baseline"]) == 1  # the start measured once, before the signal


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("tune-site")
    db = f"sqlite:///{tmp / 'registry.sqlite3'}"
    with serve_process(db, log=tmp / "serve.log", seed=True) as base:
        yield base, db


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return dict(json.load(r))


def test_publish_as_a_fork(tmp_path: Path, site: tuple[str, str], lair_home: Path) -> None:
    """One knob (--threads 1 against the copy's 8) at one stream: a cell the registry takes (at 4
    streams this shared 2-core machine makes the bench client-bound, and the registry refuses that)."""
    base, db = site
    recipe = _copy(tmp_path)
    made = lair("registry", "user", "add", "tuner", "--scopes", "read,publish", "--db", db, "--json")
    assert made.returncode == 0, made.stderr
    env = {"LAIR_REGISTRY": base, "LAIR_TOKEN": json.loads(made.stdout)["token"]}
    args = [
        "--param=--threads=1",
        "--objective",
        "max decode_tok_s_per_stream@ctx=256,c=1",
        "--sampler",
        "grid",
    ]
    res = lair("tune", str(recipe), *args, *TUNE, "--json", "--publish", env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["best"]["knobs"] == {"--threads": "1"}, out["trials"]
    pub = out["published"]
    assert pub["upstream"] == "tiny-cpu" and pub["slug"] == "tiny-cpu-tuner" and pub["revision"] == 2
    text = urllib.request.urlopen(f"{base}/api/v1/recipes/tiny-cpu-tuner.toml", timeout=10).read().decode()
    got = tomllib.loads(text)
    assert got["meta"]["tune"]["study"] == out["study"] and got["meta"]["tune"]["knobs"] == {"--threads": "1"}
    assert (
        "--threads" in got["entrypoint"]
        and got["entrypoint"][got["entrypoint"].index("--threads") + 1] == "1"
    )
    page = _get(f"{base}/api/v1/recipes/tiny-cpu-tuner.json")
    assert pub["report"]["rows"] >= 1
    assert page["upstream"] == "tiny-cpu" and page["upstream_revision"] == 1, page
    assert (
        page["revision"] == 2
        and "Tuned by lair tune" in page["revisions"][-1]["notes"] + page["revisions"][0]["notes"]
    )
    rows = [m for m in page["measurements"] if m.get("revision") in (2, None)]
    assert len(page["measurements"]) == pub["report"]["rows"] >= 1, page["measurements"]
    assert {(m["context"], m["concurrency"]) for m in rows} == {(256, 1)}, page["measurements"]


ARITH = ROOT / "src" / "lair" / "eval" / "tasks" / "lair_arith.jsonl"
GUARD_LIMIT = 4
NO_SIX = "root ::= [^6]*"
KNOBS = ("--cache-type-k", "--grammar")
GUARD_SPACE = f"""\
sampler = "grid"
objective = "max decode_tok_s_per_stream@ctx=256,c=1"
guard = "lair_arith:10"
budget = "4m"
trials = 10

[[param]]
name = "--cache-type-k"          # a KV dtype: guarded by its name
values = ["q8_0"]

[[param]]
name = "--grammar"
values = ["{NO_SIX}"]
changes_output = true
"""


def _arith_right(output: str, answer: str) -> bool:
    """lair_arith's own rule (its yaml): the first integer of the output is the answer."""
    m = re.search(r"-?[0-9]+", output)
    return m is not None and m.group(0) == answer


def test_quality_guard_rejects_the_candidate_that_answers_worse(tmp_path: Path, lair_home: Path) -> None:
    """The guard on the real ``lair eval``: the model is scripted to answer "69" to every prompt (right
    for doc 3 of lair_arith's first four, 33 + 36, by the task file), so the start scores 25 points.
    A KV dtype (``--cache-type-k q8_0``, guarded by its name) leaves the answers as they are on this
    model (its layers write nothing to the residual stream): it passes. A server-wide grammar without
    the digit 6 (llama.cpp's ``--grammar``, applied to every request that sends none) cannot say 69:
    that candidate and the one with both knobs lose 25 points, more than the guard's 10, and are
    rejected with their scores while benched like the others. Expected scores come from the task
    file and each trial's own per-sample records, by the task's rule."""
    from lair.testing.tiny_model import make_tiny_model

    model = make_tiny_model(tmp_path / "model", answer="69", ctx=8192).parent
    recipe = _copy(tmp_path, GUARD_SPACE, threads="1")
    # the recipe's hook builds the model the same way, so it keeps this folder (its stamp matches)
    hook = '"{MODEL_DIR}", "--ctx", "8192"]'
    assert hook in recipe.read_text()
    recipe.write_text(recipe.read_text().replace(hook, '"{MODEL_DIR}", "--ctx", "8192", "--answer", "69"]'))
    args = ["--space", str(tmp_path / "space.toml"), "--guard-limit", str(GUARD_LIMIT)]
    args += ["--decode-tokens", "512", "--no-confirm", "--set", f"MODEL_DIR={model}", "--json"]
    t0 = time.monotonic()
    res = lair("tune", str(recipe), *args, timeout=300)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr[-4000:]
    doc = json.loads(res.stdout)
    assert doc["guard"] == "lair_arith:10" and doc["stop_reason"] == "every candidate of the space was tried"
    assert doc["counts"] == {"ok": 2, "rejected": 2, "refused": 0, "failed": 0, "interrupted": 0}, doc
    answers = [json.loads(x)["answer"] for x in ARITH.read_text().splitlines()][:GUARD_LIMIT]
    start = 100 * sum(a == "69" for a in answers) / GUARD_LIMIT
    assert start == 25.0  # doc 3 only
    trials = {(t["knobs"]["--cache-type-k"], t["knobs"]["--grammar"]): t for t in doc["trials"]}
    assert set(trials) == {(k, g) for k in ("(unset)", "q8_0") for g in ("(unset)", NO_SIX)}
    for (kv, grammar), t in trials.items():
        report = Path(t["report"])
        samples = [json.loads(x) for x in (report / "eval_samples.jsonl").read_text().splitlines()]
        assert sorted(s["doc_id"] for s in samples) == list(range(GUARD_LIMIT)), samples
        outputs = {s["doc_id"]: s["output"] for s in samples}
        right = [_arith_right(outputs[i], a) for i, a in enumerate(answers)]
        assert [s["verdict"] == "pass" for s in sorted(samples, key=lambda s: s["doc_id"])] == right
        score = 100 * sum(right) / GUARD_LIMIT
        assert t["guard_score"] == pytest.approx(score), t
        results = json.loads((report / "results.json").read_text())
        assert results["eval"]["suites"][0]["score"] == pytest.approx(score / 100)
        assert len(results["bench"]["cells"]) == 1 and t["values"][0] > 0  # benched, whatever the guard
        ran = tomllib.loads((report / results["recipe"]["file"]).read_text())  # the recipe as run
        argv = ran["entrypoint"] + ran.get("args", [])
        assert [argv[argv.index(f) + 1] if f in argv else "(unset)" for f in KNOBS] == [kv, grammar]
        if grammar == "(unset)":
            assert [o.strip() for o in outputs.values()] == ["69"] * GUARD_LIMIT  # as scripted
            assert t["outcome"] == "ok" and t["reason"] is None and score == start, t
        else:
            assert all("6" not in o and o for o in outputs.values()), outputs  # the grammar held
            assert score < start - 10
            assert t["outcome"] == "rejected" and t["stage"] == "guard", t
            assert t["reason"] == (
                f"quality lair_arith:10: {score:g} points on lair_arith against {start:g} at the start"
                f" ({start - score:g} lost, more than 10)"
            )
    assert trials[("(unset)", "(unset)")]["baseline"] and doc["best"]["knobs"]["--grammar"] == "(unset)"
    assert "quality lair_arith:10" in (Path(doc["folder"]) / "report.md").read_text()
    assert took < 180, took
