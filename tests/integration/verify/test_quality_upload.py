"""Quality rows from uploaded reports, through the real app over SQLite and PostgreSQL: reports that
the real ``lair`` command wrote (``lair launch --bench --eval`` on the tiny CPU engine; ``lair eval
--recipe`` against a server whose answers are chosen in advance, so the score is known by hand) are
re-scored by the registry and shown as verified rows; tampered ones are refused with their reasons
and leave nothing stored; two rigs that agree replicate a row, one rig twice does not. Through
``lair serve`` and ``lair submit``: the row in Chromium, and gsm8k checked against the registry's
own copy of the data set."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from starlette.testclient import TestClient
from verify_helpers import BENCH, ROOT, lair, tiny_copy

from lair.client import pack_report
from lair.testing.answer_server import running_answer_server

pytestmark = [pytest.mark.integration]

Site = tuple[TestClient, Engine, Path]
ARITH = [json.loads(x) for x in (ROOT / "src/lair/eval/tasks/lair_arith.jsonl").read_text().splitlines()]
RIGHT = (0, 3, 5)  # answered right with seed 1234 (repeat 1); 5 is wrong with seed 1235 (repeat 2)
# repeat 1: 3/8, stderr sqrt(p (1 - p) / (n - 1)); repeat 2: 2/8; the suite: the means over repeats
SCORE = 100 * (3 / 8 + 2 / 8) / 2
STDERR = 100 * (math.sqrt(3 / 8 * 5 / 8 / 7) + math.sqrt(2 / 8 * 6 / 8 / 7)) / 2


def _answers() -> dict[str, Any]:
    rules = [{"contains": ARITH[5]["question"], "reply": " 1", "seed": 1235}]
    rules += [{"contains": ARITH[i]["question"], "reply": f" {ARITH[i]['answer']}\n"} for i in RIGHT]
    return {"rules": rules, "default": " I do not know"}


def _answered(where: Path, n: int) -> list[Path]:
    """``n`` reports of ``lair eval --recipe`` (tiny-cpu, as published) against the answer server."""
    recipe, out = tiny_copy(where), []
    with running_answer_server(_answers()) as url:
        for i in range(n):
            args = ["--suite", "lair_arith", "--limit", "8", "--repeat", "2", "--recipe", str(recipe)]
            res = lair("eval", url, *args, "--out", str(where / f"report-{i}"), "--json")
            assert res.returncode == 0, res.stderr
            out.append(Path(json.loads(res.stdout)["report"]))
    return out


@pytest.fixture(scope="module")
def answered(tmp_path_factory: pytest.TempPathFactory, lair_home: Path) -> list[Path]:
    return _answered(tmp_path_factory.mktemp("answered"), 3)


@pytest.fixture(scope="module")
def bench_eval_report(tmp_path_factory: pytest.TempPathFactory, lair_home: Path) -> Path:
    """A real ``lair launch --bench --eval lair_arith`` report of the tiny-cpu example (clean bench)."""
    recipe = tiny_copy(tmp_path_factory.mktemp("bench-eval"))
    evals = ["--eval", "lair_arith", "--eval-limit", "8", "--eval-repeat", "2"]
    for _ in range(3):  # on a loaded machine the bench may flag its own run client-bound
        res = lair("launch", str(recipe), *BENCH, *evals, "--json", timeout=300)
        assert res.returncode == 0, res.stderr
        report = Path(json.loads(res.stdout)["report"])
        cells = json.loads((report / "results.json").read_text())["bench"]["cells"]
        if not [f for c in cells for f in c["flags"]]:
            return report
    raise AssertionError("no clean bench in 3 tries")


def _post(c: TestClient, folder: Path) -> Any:
    return c.post(
        "/api/v1/reports", content=pack_report(folder), headers={"content-type": "application/gzip"}
    )


def _stored(site: Site) -> tuple[int, int, int]:
    _, engine, blobs = site
    with engine.connect() as conn:
        reports = conn.execute(sa.text("SELECT count(*) FROM reports")).scalar_one()
        q = "SELECT count(*) FROM quality_measurements WHERE provenance <> 'reported'"
        quality = conn.execute(sa.text(q)).scalar_one()
    return reports, quality, sum(1 for p in blobs.rglob("*") if p.is_file()) if blobs.exists() else 0


def _samples(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (folder / "eval_samples.jsonl").read_text().splitlines()]


def _by_hand(samples: list[dict[str, Any]]) -> float:
    """The task's rule, applied here: the first integer of the output is the answer."""
    right = [
        (m := re.search(r"-?[0-9]+", s["output"])) is not None and m.group(0) == ARITH[s["doc_id"]]["answer"]
        for s in samples
    ]
    return 100 * sum(right) / len(right)


def test_a_launch_bench_eval_report_gets_speed_rows_and_a_verified_quality_row(
    site: Site, bench_eval_report: Path
) -> None:
    c = site[0]
    r = _post(c, bench_eval_report)
    assert r.status_code == 201, r.text
    doc, samples = r.json(), _samples(bench_eval_report)
    assert len(doc["rows"]) == 1 and len(samples) == 16 and {s["repeat"] for s in samples} == {0, 1}
    (q,) = doc["quality"]
    assert (q["suite"], q["n"], q["repeats"], q["provenance"]) == ("lair_arith", 8, 2, "verified")
    assert q["score"] == pytest.approx(_by_hand(samples))
    twin = c.get("/recipes/tiny-cpu.json").json()
    (row,) = [x for x in twin["quality"] if x["report_id"] == doc["id"]]
    assert (row["tier"], row["rigs"], row["score"]) == ("verified", 1, q["score"])
    assert c.get(row["links"]["samples"]).content == (bench_eval_report / "eval_samples.jsonl").read_bytes()
    page = c.get("/recipes/tiny-cpu").text
    assert f'href="/reports/{doc["id"]}/files/eval_samples.jsonl"' in page
    assert _stored(site)[:2] == (1, 1)


def test_an_answered_report_is_verified_with_the_score_known_by_hand(
    site: Site, answered: list[Path]
) -> None:
    c = site[0]
    r = _post(c, answered[0])
    assert r.status_code == 201, r.text
    (q,) = r.json()["quality"]
    assert q["score"] == pytest.approx(SCORE) and q["stderr"] == pytest.approx(STDERR)
    assert (q["n"], q["repeats"], q["spread_min"], q["spread_max"], q["flips"]) == (8, 2, 25.0, 37.5, 1)
    assert r.json()["rows"] == []  # an evaluation-only report: no speed rows
    page = c.get("/recipes/tiny-cpu").text
    tr = re.search(r'<tr [^>]*data-provenance="verified".*?</tr>', page, re.S)
    assert tr is not None
    assert (
        '<td class="score">31.25%</td>' in tr[0]
        and "± 17.33" in tr[0]
        and "25.0–37.5 over 2, 1 flip" in tr[0]
    )


def _tampered(site: Site, folder: Path, *needles: str) -> None:
    r = _post(site[0], folder)
    body = r.json()
    assert r.status_code == 422 and body["ok"] is False and body["error"]["status"] == 422, body
    reasons = body["error"]["reasons"]
    for needle in needles:
        assert any(needle in x for x in reasons), (needle, reasons)
    assert _stored(site) == (0, 0, 0)


def _copy(src: Path, tmp_path: Path) -> Path:
    out = tmp_path / src.name
    shutil.copytree(src, out)
    return out


def _rewrite(folder: Path, samples: list[dict[str, Any]] | None = None, **suite: Any) -> None:
    if samples is not None:
        (folder / "eval_samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    doc = json.loads((folder / "results.json").read_text())
    doc["eval"]["suites"][0] |= suite
    (folder / "results.json").write_text(json.dumps(doc))


def test_a_verdict_flipped_to_correct_is_refused(site: Site, answered: list[Path], tmp_path: Path) -> None:
    folder = _copy(answered[0], tmp_path)
    samples = _samples(folder)
    wrong = next(s for s in samples if s["repeat"] == 0 and s["doc_id"] == 1)
    wrong |= {"score": 1.0, "verdict": "pass"}
    spread = {"scores": [0.5, 0.25], "min": 0.25, "max": 0.5, "std": 0.125, "flips": 2}
    stderr = (math.sqrt(4 / 8 * 4 / 8 / 7) + math.sqrt(2 / 8 * 6 / 8 / 7)) / 2  # consistent figures...
    _rewrite(folder, samples, score=0.375, stderr=stderr, spread=spread)
    _tampered(site, folder, "repeat 0 document 1: score 1.0 in the report; re-scoring its output gives 0.0")


def test_an_edited_score_is_refused(site: Site, answered: list[Path], tmp_path: Path) -> None:
    folder = _copy(answered[0], tmp_path)
    _rewrite(folder, score=0.9)
    _tampered(site, folder, "eval suite lair_arith: score is 0.9 in results.json; its samples give 0.3125")


def test_a_dropped_sample_is_refused(site: Site, answered: list[Path], tmp_path: Path) -> None:
    folder = _copy(answered[0], tmp_path)
    samples = [s for s in _samples(folder) if (s["repeat"], s["doc_id"]) != (1, 7)]
    _rewrite(folder, samples)
    _tampered(site, folder, "repeat 1: 7 samples for n 8 (missing documents [7]")


def _as_another_rig(folder: Path) -> None:
    """The report as a second rig would have written it: its fingerprint names another CPU."""
    doc = json.loads((folder / "results.json").read_text())
    doc["fingerprint"]["cpu"]["model"] = "Another CPU 9000"
    (folder / "results.json").write_text(json.dumps(doc))
    (folder / "fingerprint.json").write_text(json.dumps(doc["fingerprint"]))


def _tiers(c: TestClient) -> list[tuple[str, int, float | None]]:
    rows = c.get("/recipes/tiny-cpu.json").json()["quality"]
    return sorted((q["tier"], q["rigs"], q["spread"]) for q in rows if q["report_id"])


def test_two_rigs_of_two_accounts_that_agree_replicate_one_rig_twice_does_not(
    site: Site, answered: list[Path], tmp_path: Path
) -> None:
    c = site[0]
    assert _post(c, answered[0]).status_code == 201
    assert _post(c, answered[1]).status_code == 201  # a second run on the same rig
    assert _tiers(c) == [("verified", 1, None), ("verified", 1, None)]
    claimed = _copy(answered[0], tmp_path / "claimed")
    _as_another_rig(claimed)  # the same run claimed by another rig is still the same report
    assert _post(c, claimed).json()["error"]["code"] == "duplicate"
    other = _copy(answered[2], tmp_path / "other")
    _as_another_rig(other)
    from lair.registry.service.accounts import create_token, create_user

    with site[1].begin() as conn:
        second = create_token(conn, create_user(conn, "second-owner"), "cli")
    mine = c.headers["authorization"]
    c.headers["authorization"] = f"Bearer {second}"  # another rig of another account
    try:
        assert _post(c, other).status_code == 201
    finally:
        c.headers["authorization"] = mine
    assert _tiers(c) == [("replicated", 2, 0.0)] * 3
    page = c.get("/recipes/tiny-cpu").text
    assert (
        page.count('data-tier="replicated"') == 3
        and '<span class="rigs">2 rigs</span> · spread 0.0 pt' in page
    )


def test_lair_submit_of_an_eval_report_shows_the_verified_row_in_chromium(
    browser: Any, answered: list[Path], tmp_path: Path
) -> None:
    from lair.registry.db.engine import connect_url, make_engine
    from lair.registry.service.accounts import create_token, create_user
    from lair.testing.registry import serve_process

    db = connect_url(str(tmp_path / "registry.sqlite3"))
    with serve_process(db, log=tmp_path / "serve.log") as base:
        engine = make_engine(db)
        with engine.begin() as conn:
            token = create_token(conn, create_user(conn, "rig-owner"), "cli")
        engine.dispose()
        res = lair("submit", str(answered[0]), env={"LAIR_REGISTRY": base, "LAIR_TOKEN": token})
        assert res.returncode == 0 and "stored" in res.stderr, res.stderr
        page = browser.new_page()
        page.goto(f"{base}/recipes/tiny-cpu")
        row = page.locator('table.quality tr[data-provenance="verified"]')
        assert row.count() == 1
        assert row.locator("td.score").inner_text() == "31.25%"
        assert row.locator("td.n").inner_text() == "8"
        assert row.locator("td.tier").get_attribute("data-tier") == "verified"
        assert "1 rig" in row.locator("td.tier").inner_text()
        reported = page.locator('table.quality tr[data-provenance="reported"]')
        assert reported.count() == 0  # tiny-cpu types no quality figures
        page.goto(base + str(row.locator("a.samples").get_attribute("href")))
        got = page.locator("body").inner_text().strip()
        assert got == (answered[0] / "eval_samples.jsonl").read_text().strip()
        page.close()


def test_gsm8k_is_verified_against_the_registry_s_own_copy_of_the_data_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lair_home: Path
) -> None:
    """The registry's Hugging Face cache holds openai/gsm8k (three problems): a report of ``lair eval
    --suite gsm8k`` (2 of 3 right by gsm8k's strict-match, worked out by hand) is verified; the same
    report with a target changed to the model's wrong answer is refused, naming the document."""
    from lair.registry.db.engine import connect_url, make_engine
    from lair.registry.service.accounts import create_token, create_user
    from lair.testing.hf_cache import GSM8K_TEST, tiny_gsm8k
    from lair.testing.registry import serve_process

    home = tmp_path / "hf"
    tiny_gsm8k(home / "hub")
    for key in [k for k in os.environ if k.startswith("HF_")]:
        monkeypatch.delenv(key)
    for key, value in {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}.items():
        monkeypatch.setenv(key, value)  # for the eval and for the registry's process alike
    rules = [
        {"contains": GSM8K_TEST[0][0], "reply": " 3*6 = 18\n#### 18"},
        {"contains": GSM8K_TEST[1][0], "reply": " It is $14.\n#### 14"},
        {"contains": GSM8K_TEST[2][0], "reply": " 2,400 pages, so\n#### 2,000"},
    ]
    recipe = tiny_copy(tmp_path / "recipe")
    with running_answer_server({"rules": rules, "default": "?"}) as url:
        args = [
            "--suite",
            "gsm8k",
            "--num-fewshot",
            "0",
            "--recipe",
            str(recipe),
            "--out",
            str(tmp_path / "r"),
        ]
        res = lair("eval", url, *args, "--json")
    assert res.returncode == 0, res.stderr
    db = connect_url(str(tmp_path / "registry.sqlite3"))
    with serve_process(db, log=tmp_path / "serve.log") as base:
        engine = make_engine(db)
        with engine.begin() as conn:
            token = create_token(conn, create_user(conn, "rig-owner"), "cli")
        engine.dispose()
        env = {"LAIR_REGISTRY": base, "LAIR_TOKEN": token}
        forged = _copy(tmp_path / "r", tmp_path / "forged")
        samples = _samples(forged)
        samples[2] |= {"target": "#### 2,000", "score": 1.0, "verdict": "pass"}
        spread = {"scores": [1.0], "min": 1.0, "max": 1.0, "std": 0.0, "flips": 0}
        _rewrite(forged, samples, score=1.0, stderr=0.0, spread=spread)
        refused = lair("submit", str(forged), env=env)
        assert refused.returncode == 3, refused.stderr
        assert "gsm8k repeat 0 document 2: the target is not the data set's reference" in refused.stderr
        ok = lair("submit", str(tmp_path / "r"), env=env)
        assert ok.returncode == 0 and "stored" in ok.stderr, ok.stderr
        with urllib.request.urlopen(f"{base}/recipes/tiny-cpu.json", timeout=10) as r:
            rows = json.loads(r.read())["quality"]
    (q,) = rows
    assert (q["suite"], q["metric"], q["n"], q["tier"], q["note"]) == (
        "gsm8k", "exact_match,strict-match", 3, "verified", ""
    )  # fmt: skip
    assert q["score"] == pytest.approx(100 * 2 / 3)
    assert q["stderr"] == pytest.approx(100 * math.sqrt(2 / 3 * 1 / 3 / 2))


def _needle_report(reply: str, out: Path, recipe: Path) -> Path:
    from lair.testing.calibrated_server import running_server

    with running_server("--ttft-ms", "5", "--token-ms", "1", "--reply", reply) as url:
        args = ["--suite", "needle", "--needle-context", "256", "--needle-depths", "0.2,0.8", "--seed", "5"]
        res = lair("eval", url, *args, "--recipe", str(recipe), "--out", str(out), "--json")
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture(scope="module")
def needle_report(tmp_path_factory: pytest.TempPathFactory, lair_home: Path) -> Path:
    """The needle at two depths against a server that replies the first depth's passphrase (1/2)."""
    where = tmp_path_factory.mktemp("needle")
    recipe = tiny_copy(where)
    first = _needle_report("no idea", where / "probe", recipe)  # the passphrases of seed 5
    secret = _samples(first)[0]["target"]
    return _needle_report(secret, where / "report", recipe)


def test_the_needle_is_verified_with_its_passphrases_regenerated(
    site: Site, needle_report: Path, tmp_path: Path
) -> None:
    samples = _samples(needle_report)
    assert [s["verdict"] for s in samples] == ["pass", "fail"]
    forged = _copy(needle_report, tmp_path / "forged")
    claimed = [s | {"target": samples[0]["output"], "score": 1.0, "verdict": "pass"} for s in samples]
    spread = {"scores": [1.0], "min": 1.0, "max": 1.0, "std": 0.0, "flips": 0}
    _rewrite(forged, claimed, score=1.0, stderr=0.0, spread=spread)  # "both depths found"
    _tampered(
        site, forged, "eval suite needle repeat 0 document 1: the target is not the data set's reference"
    )
    r = _post(site[0], needle_report)
    assert r.status_code == 201, r.text
    (q,) = r.json()["quality"]
    assert (q["suite"], q["metric"], q["n"], q["score"], q["stderr"], q["provenance"]) == (
        "needle", "found", 2, 50.0, 50.0, "verified"
    )  # fmt: skip
