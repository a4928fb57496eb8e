"""The matrix (engine version x GPU x driver) and the speed history, per recipe and per model, from
reports stamped with three versions of one CPU engine (SQLite and PostgreSQL). Each report's timings
are the synthetic report's stretched by a factor, so its decode is the base's (98.387 tok/s: 100 and
96.774 tok/s per repeat, see test_replication_upload) divided by that factor, by hand."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine
from upload_site import Site, make_site

from lair.registry.service.matrix import version_key
from lair.registry.service.recompute import check_cells

BASE_DECODE = (100.0 + 3 / 0.031) / 2
VERSIONS = [("2026.10.2", 0.9), ("2026.9.1", 1.0), ("2026.11.0", 1.5)]  # uploaded out of order


@pytest.fixture
def site(db_url: str, engine: Engine) -> Iterator[Site]:
    yield from make_site(db_url, engine)


def stamped(site: Site, version: str, factor: float) -> dict[str, Any]:
    """The site's report with ``engine.version`` set and its times stretched, its cell recomputed."""
    files = site.report()
    for row in files["requests.jsonl"]:
        row["chunk_ms"] = [round(t * factor, 3) for t in row["chunk_ms"]]
        row["ttft_ms"] = row["chunk_ms"][0]
    for fp in (files["fingerprint.json"], files["results.json"]["fingerprint"]):
        fp["engine"] = {"name": "llama.cpp (xllamacpp)", "version": version, "source": "its package"}
    (again,), _ = check_cells(files["results.json"]["bench"], files["requests.jsonl"])
    cell = files["results.json"]["bench"]["cells"][0]
    cell.update({k: v for k, v in again.items() if k in cell})
    return files


def _upload_all(site: Site) -> None:
    for version, factor in VERSIONS:
        res = site.upload(stamped(site, version, factor))
        assert res.status_code == 201, res.text


def test_engine_versions_sort_as_numbers() -> None:
    assert sorted(["2026.10.2", "2026.9.1", "0.12.0", "0.10.2"], key=version_key) == [
        "0.10.2", "0.12.0", "2026.9.1", "2026.10.2",
    ]  # fmt: skip


def test_the_matrix_of_a_recipe_has_a_row_per_engine_version(site: Site) -> None:
    _upload_all(site)
    checked = site.client.get("/recipes/tiny-cpu/matrix.json").json()
    assert checked["matrix"]["rows"] == [] and checked["hidden_unchecked"] == 3  # CPU rows: never verified
    doc = site.client.get("/recipes/tiny-cpu/matrix.json?unchecked=1").json()
    assert (doc["context"], doc["concurrency"], doc["engines"]) == (256, 1, 3)
    assert doc["matrix"]["columns"] == [{"gpu": "CPU AMD EPYC", "driver": "—"}]
    assert [r["version"] for r in doc["matrix"]["rows"]] == ["2026.9.1", "2026.10.2", "2026.11.0"]
    decodes = [r["cells"][0]["decode_tok_s"] for r in doc["matrix"]["rows"]]
    assert decodes == pytest.approx([BASE_DECODE, BASE_DECODE / 0.9, BASE_DECODE / 1.5], rel=1e-3)
    assert {r["cells"][0]["status"] for r in doc["matrix"]["rows"]} == {"pass"}
    (series,) = doc["history"]
    changes = [p["change"] for p in series["points"]]
    assert changes[0] is None and changes[1:] == pytest.approx([1 / 0.9 - 1, 0.9 / 1.5 - 1], rel=1e-3)
    assert [p["regression"] for p in series["points"]] == [False, False, True] and series["regressions"] == 1


def test_the_matrix_page_and_the_model_matrix(site: Site) -> None:
    _upload_all(site)
    page = site.client.get("/recipes/tiny-cpu/matrix?unchecked=1")
    assert page.status_code == 200
    assert page.text.count('data-engine="llama.cpp (xllamacpp)"') == 3
    assert (
        'data-regression="yes"' in page.text
        and '-40.0% <strong class="flag">regression</strong>' in page.text
    )
    model = site.client.get("/models/lair/tiny-random-llama/matrix.json?unchecked=1")
    assert model.status_code == 200, model.text
    assert model.json()["matrix"]["rows"][0]["cells"][0]["recipes"] == ["tiny-cpu"]
    assert 'href="/recipes/tiny-cpu/matrix"' in site.client.get("/recipes/tiny-cpu").text


@pytest.mark.parametrize(
    ("path", "status", "why"),
    [
        ("/recipes/no-such-recipe/matrix.json", 404, "no recipe"),
        ("/recipes/tiny-cpu/matrix.json?context=abc", 422, "query parameter context: not an integer"),
        ("/recipes/tiny-cpu/matrix.json?unchecked=maybe", 422, "query parameter unchecked"),
        ("/recipes/tiny-cpu/matrix?concurrency=0", 422, "query parameter concurrency"),
    ],
)
def test_bad_matrix_queries_are_4xx(site: Site, path: str, status: int, why: str) -> None:
    res = site.client.get(path)
    assert res.status_code == status and why in res.text, res.text
