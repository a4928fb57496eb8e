"""The matrix and the speed history in headless Chromium, from real tiny-cpu reports stamped with three
versions of its CPU engine (copies of the session's real report: the fingerprint's engine version
edited, the raw timings stretched so each is a report of its own, every cell recomputed from them as
the registry recomputes it), uploaded to a real ``lair serve``. The newest version is 1.5x slower:
a regression the history flags."""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from verify_helpers import BENCH, lair, tiny_copy

from lair.client import Client, Credentials, pack_report
from lair.registry.service.attempts import cell_stats
from lair.registry.service.recompute import check_cells
from lair.testing.registry import serve_process

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]  # a loaded machine: runs again

STAMPS = [("2026.9.3", 0.95), ("2026.10.1", 1.0), ("2026.11.0", 1.5)]  # (engine version, time factor)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[tuple[str, str]]:
    db = f"sqlite:///{tmp_path / 'registry.sqlite3'}"
    with serve_process(db, log=tmp_path / "serve.log") as base:
        res = lair("registry", "user", "add", "rig-owner", "--db", db, "--json")
        assert res.returncode == 0, res.stderr
        yield base, json.loads(res.stdout)["token"]


@pytest.fixture
def real_report(tmp_path: Path, lair_home: Path) -> Path:
    """A real tiny-cpu report with no flags (the bundled example's port is shared with every other
    run of it on this machine: polled until free, with a deadline)."""
    import time

    recipe, deadline = tiny_copy(tmp_path / "real"), time.monotonic() + 300
    while time.monotonic() < deadline:
        res = lair("launch", str(recipe), *BENCH, "--json")
        if res.returncode == 1 and "port 8091" in res.stderr:
            time.sleep(2)
            continue
        assert res.returncode == 0, res.stderr
        report = Path(json.loads(res.stdout)["report"])
        cells = json.loads((report / "results.json").read_text())["bench"]["cells"]
        if not any(c["flags"] for c in cells):  # a client-bound run is refused: run again
            return report
    raise AssertionError("no clean run of the tiny-cpu example in 5 minutes")


def stamped(report: Path, where: Path, version: str, factor: float) -> Path:
    """A copy of ``report`` run by engine ``version``, its times after each send x ``factor``."""
    out = where / f"{report.name}-{version}"
    shutil.copytree(report, out)
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines() if line.strip()]
    for row in rows:
        row["chunk_ms"] = [round(t * factor, 3) for t in row["chunk_ms"]]
        row["ttft_ms"] = row["chunk_ms"][0] if row["chunk_ms"] else row["ttft_ms"]
    raw = "".join(json.dumps(r) + "\n" for r in rows)
    (out / "requests.jsonl").write_text(raw)
    doc = json.loads((out / "results.json").read_text())
    fp = json.loads((out / "fingerprint.json").read_text())
    for f in (fp, doc["fingerprint"]):
        f["engine"]["version"] = version
        f["engine_version"] = f"{f['engine']['name']} {version}"
    again, _ = check_cells(doc["bench"], rows)
    for cell, new in zip(doc["bench"]["cells"], again, strict=True):
        cell.update({k: v for k, v in new.items() if k in cell})
        stats = cell_stats(json.dumps(doc).encode(), raw.encode(), cell["context"], cell["concurrency"])
        cell["stats"] = stats
    (out / "results.json").write_text(json.dumps(doc))
    (out / "fingerprint.json").write_text(json.dumps(fp))
    return out


def _json(url: str) -> Any:
    with urllib.request.urlopen(url) as r:
        return json.loads(r.read())


def test_the_matrix_and_history_render_with_three_engine_versions(
    registry: tuple[str, str], real_report: Path, tmp_path: Path, browser: Any
) -> None:
    base, token = registry
    client = Client(Credentials(base, token))
    for version, factor in STAMPS:
        res = client.submit(pack_report(stamped(real_report, tmp_path, version, factor)))
        assert res["slug"] == "tiny-cpu", res
    doc = _json(f"{base}/recipes/tiny-cpu/matrix.json?unchecked=1")
    assert [r["version"] for r in doc["matrix"]["rows"]] == [v for v, _ in STAMPS]
    (series,) = doc["history"]
    decodes = [p["decode_tok_s"] for p in series["points"]]
    assert decodes[2] == pytest.approx(decodes[1] / 1.5, rel=0.01)  # the same timings, 1.5x longer
    assert [p["regression"] for p in series["points"]] == [False, False, True]

    page = browser.new_page()
    page.goto(f"{base}/recipes/tiny-cpu")
    page.click("#matrix-link")
    assert page.url.endswith("/recipes/tiny-cpu/matrix")
    assert "No verified or replicated rows yet" in page.inner_text("article")  # a CPU rig is never verified
    page.click("#with-unchecked")
    rows = page.locator("#matrix tbody tr")
    assert rows.count() == 3
    assert [rows.nth(i).get_attribute("data-version") for i in range(3)] == [v for v, _ in STAMPS]
    first = rows.nth(0).locator("td.cell")
    assert f"{doc['matrix']['rows'][0]['cells'][0]['decode_tok_s']:,.1f} tok/s" in first.inner_text()
    assert first.get_attribute("data-status") == "pass" and "reported-by-report" in first.inner_text()
    assert "driver —" in page.locator("#matrix thead").inner_text()
    flagged = page.locator('table.history-table tr[data-regression="yes"]')
    assert flagged.count() == 1 and flagged.get_attribute("data-version") == "2026.11.0"
    assert "regression" in flagged.inner_text() and "-33.3%" in flagged.inner_text()
    assert page.locator("svg.history-chart circle").count() == 3
    assert page.locator("svg.history-chart circle.regression").count() == 1
    box = page.locator("#matrix").bounding_box()
    assert box is not None and box["width"] > 200
    out = Path(__import__("os").environ.get("LAIR_TEST_ARTIFACTS") or tmp_path)
    page.screenshot(path=str(out / "matrix-tiny-cpu.png"), full_page=True)
    page.close()
