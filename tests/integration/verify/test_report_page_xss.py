"""Text that a report's uploader controls (the fingerprint's CPU and GPU model names) is shown on the
report page and in the recipe page's roofline cells. Each page is rendered by the registry, then loaded
into Chromium as it is, without the registry's Content-Security-Policy (so escaping alone must hold): no
payload executes or creates an element, and the payloads are shown as text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lair.client import pack_report
from lair.testing.xss import PAYLOADS, created

pytestmark = pytest.mark.integration


def _poison(folder: Path) -> None:
    doc = json.loads((folder / "fingerprint.json").read_text())
    doc["cpu"]["model"] = " ".join(PAYLOADS[:26])
    doc["gpus"] = {"count": 1, "models": PAYLOADS, "driver": None, "memory": [], "cuda": None}
    (folder / "fingerprint.json").write_text(json.dumps(doc))
    results = json.loads((folder / "results.json").read_text())
    results["fingerprint"] = doc  # the two copies must agree, or the upload is refused for that
    # a rig with a GPU must certify its GPU telemetry, which this CPU run has none of: without any
    # certificate the report is accepted as it was before certificates (at most reported-by-report)
    results["bench"].pop("certificate", None)
    for cell in results["bench"]["cells"]:
        cell.pop("certificate", None)
    (folder / "results.json").write_text(json.dumps(results))


def test_fingerprint_names_never_execute_on_the_report_and_recipe_pages(
    site: Any, report_copy: Path, browser: Any
) -> None:
    c, _engine, _blobs = site
    _poison(report_copy)
    r = c.post(
        "/api/v1/reports", content=pack_report(report_copy), headers={"content-type": "application/gzip"}
    )
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    ctx = browser.new_context()
    page = ctx.new_page()
    fired: list[str] = []
    page.on("dialog", lambda d: (fired.append(d.message), d.dismiss()))
    shown = {}
    for url in (f"/reports/{rid}", "/recipes/tiny-cpu"):
        html = c.get(url)
        assert html.status_code == 200, url
        page.set_content(html.text)
        assert created(page) == 0, url
        shown[url] = page.locator("main").text_content() or ""  # closed <details> included
    ctx.close()
    assert fired == []
    # the rig's values are shown as text, each cut at 300 characters
    assert ("1x " + ", ".join(PAYLOADS))[:300] in shown[f"/reports/{rid}"]  # the GPU names
    assert " ".join(PAYLOADS[:26])[:300] in shown[f"/reports/{rid}"]  # the CPU model
    assert PAYLOADS[0] in shown["/recipes/tiny-cpu"]  # the roofline cell names the report's (unknown) GPU
