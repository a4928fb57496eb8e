"""Warm multi-turn cells through the real app over SQLite and PostgreSQL: reports that ``lair bench
--sessions --recipe`` wrote against the calibrated server (a longest-prefix cache, or none) are
recomputed by the registry from their ``sessions.jsonl``, stored as ``cache: warm`` apart from the
speed rows and shown on the recipe page in a table of their own. A cell whose responses and engine
counter agree is verified; one with no reuse measured by the engine is stored, flagged, never verified.
The hit rates are checked by hand from the rows. Tampered reports (reuse declared that the previous
turn never had, a counter reading made to agree, a turn dropped) are refused with the cell named and
leave nothing stored."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient
from verify_helpers import tiny_copy

from lair.cli import main
from lair.client import pack_report
from lair.testing.calibrated_server import running_server

pytestmark = [pytest.mark.integration]

SERVER = ("--ttft-ms", "10", "--token-ms", "2")
SESSIONS = ["--sessions", "2", "--turns", "3", "--turn-tokens", "16", "--contexts", "64"]


def _bench(where: Path, *server: str) -> Path:
    recipe, out = tiny_copy(where), where / "report"
    with running_server(*SERVER, *server) as url:
        argv = ["bench", url, "--recipe", str(recipe), *SESSIONS, "--decode-tokens", "8"]
        assert main([*argv, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory, lair_home: Path) -> Path:
    return _bench(tmp_path_factory.mktemp("warm"), "--prefix-cache-longest")


@pytest.fixture(scope="module")
def uncached(tmp_path_factory: pytest.TempPathFactory, lair_home: Path) -> Path:
    return _bench(tmp_path_factory.mktemp("uncached"))


def _post(c: TestClient, folder: Path) -> Any:
    return c.post(
        "/api/v1/reports", content=pack_report(folder), headers={"content-type": "application/gzip"}
    )


def _stored(site: Any) -> tuple[int, int]:
    with site[1].connect() as conn:
        reports = conn.execute(sa.text("SELECT count(*) FROM reports")).scalar_one()
        load = conn.execute(sa.text("SELECT count(*) FROM load_measurements")).scalar_one()
    return reports, load


def _rows(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (folder / "sessions.jsonl").read_text().splitlines()]


def test_a_warm_cell_is_recomputed_verified_and_shown_apart_from_cold_rows(site: Any, warm: Path) -> None:
    c = site[0]
    r = _post(c, warm)
    assert r.status_code == 201, r.text
    doc, rows = r.json(), _rows(warm)
    assert doc["rows"] == []  # a warm run alone: no speed row
    (cell,) = doc["load"]
    assert (cell["kind"], cell["cache"], cell["provenance"], cell["note"]) == ("warm", "warm", "verified", "")
    fig = cell["figures"]
    # by hand: every later turn declares its session's previous prompt; hit rates over all prompt tokens
    prompt = sum(x["prompt_tokens"] for x in rows)
    prev = {(x["session"], x["turn"]): x["prompt_tokens"] for x in rows}
    declared = sum(prev[(x["session"], x["turn"] - 1)] for x in rows if x["turn"])
    cached = sum(x["cached_tokens"] for x in rows)
    assert (fig["requests"], fig["completed"], fig["prompt_tokens"]) == (6, 6, prompt)
    assert fig["declared_hit_rate"] == pytest.approx(declared / prompt, abs=1e-6)
    assert fig["response_hit_rate"] == pytest.approx(cached / prompt, abs=1e-6)
    assert fig["counter_hit_rate"] == fig["response_hit_rate"] and fig["hit_rates_agree"] is True
    assert (fig["sessions"], fig["turns"], fig["turn_tokens"]) == (2, 3, 16)
    twin = c.get("/recipes/tiny-cpu.json").json()
    (run,) = twin["load"]
    (g,) = run["contexts"]
    assert g["cells"] == [] and g["warm"]["provenance"] == "verified" and g["warm"]["cache"] == "warm"
    assert run["links"]["sessions"] == f"/reports/{doc['id']}/files/sessions.jsonl"
    assert "rows" not in run["links"]
    page = c.get("/recipes/tiny-cpu").text
    part = page[page.index('data-part="load"') :]
    assert 'class="warm-cells"' in part and 'class="load-cells"' not in part
    rates = (100 * declared / prompt, 100 * cached / prompt, 100 * cached / prompt)
    assert "{:.1f}% / {:.1f}% / {:.1f}%".format(*rates) in part
    assert c.get(run["links"]["sessions"]).content == (warm / "sessions.jsonl").read_bytes()
    assert _stored(site) == (1, 1)
    assert _post(c, warm).status_code == 409  # the same rows again: a duplicate


def test_a_cell_the_engine_never_reused_is_stored_flagged_and_not_verified(site: Any, uncached: Path) -> None:
    r = _post(site[0], uncached)
    assert r.status_code == 201, r.text
    (cell,) = r.json()["load"]
    assert cell["figures"]["counter_hit_rate"] == 0 and "little-reuse" in cell["flags"]
    assert cell["provenance"] == "verified"  # the engine and the responses agree: nothing was reused
    assert cell["figures"]["declared_hit_rate"] > 0.5


def _tampered(src: Path, where: Path, change: Any) -> Path:
    out = where / "tampered"
    shutil.copytree(src, out)
    results, rows = json.loads((out / "results.json").read_text()), _rows(out)
    change(results["bench"]["sessions"]["cells"][0], rows)
    (out / "results.json").write_text(json.dumps(results))
    (out / "sessions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    return out


def _over_declared(cell: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """A cold server passed off as warm: reuse declared and cached that the last turn never had."""
    x = next(x for x in rows if x["turn"] == 2)
    x["declared_reuse_tokens"] = x["cached_tokens"] = x["prompt_tokens"]


def _counter_raised(cell: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    cell["counter_hit_tokens"] = cell["response_cached_tokens"] * 2


def _turn_dropped(cell: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    rows.remove(next(x for x in rows if x["session"] == 1 and x["turn"] == 1))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_over_declared, "warm cell ctx 64 session "),
        (_counter_raised, "warm cell ctx 64: counter_hit_rate"),
        (_turn_dropped, "warm cell ctx 64: sessions.jsonl rows are not sessions 0..1 x turns 0..2"),
    ],
    ids=["over-declared", "counter", "dropped"],
)
def test_a_tampered_warm_report_is_refused_with_its_cell_and_nothing_is_stored(
    site: Any, warm: Path, tmp_path: Path, change: Any, reason: str
) -> None:
    r = _post(site[0], _tampered(warm, tmp_path, change))
    assert r.status_code == 422, r.text
    reasons = r.json()["error"]["reasons"]
    assert any(x.startswith(reason) for x in reasons), reasons
    assert _stored(site) == (0, 0)
